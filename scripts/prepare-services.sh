#!/usr/bin/env bash
# Makes the local MariaDB and PostgreSQL ready for change data capture.
# Idempotent: it changes configuration and restarts a server only when a
# setting is missing. Needs root (it edits /etc and restarts the servers).
#
#   MariaDB:    server_id, log_bin, binlog_format=ROW, binlog_row_image=FULL,
#               binlog_row_metadata=FULL; root may log in over TCP without a password.
#   PostgreSQL: wal_level=logical.
set -euo pipefail

log() { printf 'prepare-services: %s\n' "$*"; }

wait_for() { # wait_for DESCRIPTION SECONDS COMMAND...
  local what=$1 secs=$2; shift 2
  for _ in $(seq 1 "$((secs * 5))"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  log "$what did not come up within ${secs}s"; return 1
}

mysql_q() { mariadb -uroot -N -B -e "$1"; }

binlog_settings() { mysql_q "SELECT CONCAT_WS(',', @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata)"; }
binlog_ready() { case "$(binlog_settings)" in 1,ROW,FULL,FULL | ON,ROW,FULL,FULL) return 0 ;; esac; return 1; }

prepare_mariadb() {
  local cnf_dir=/etc/mysql/mariadb.conf.d cnf=/etc/mysql/mariadb.conf.d/60-outbox-cdc.cnf
  mkdir -p "$cnf_dir"
  if [ -f /etc/mysql/my.cnf ] && ! grep -Eq '^!includedir[[:space:]]+/etc/mysql/mariadb.conf.d' /etc/mysql/my.cnf; then
    printf '\n!includedir /etc/mysql/mariadb.conf.d/\n' >>/etc/mysql/my.cnf
  fi
  local want
  want=$(cat <<'CNF'
# Written by outbox-cdc scripts/prepare-services.sh
[mysqld]
user                = mysql
server_id           = 1
log_bin             = mariadb-bin
binlog_format       = ROW
binlog_row_image    = FULL
binlog_row_metadata = FULL
CNF
)
  if [ ! -f "$cnf" ] || [ "$(cat "$cnf")" != "$want" ]; then
    printf '%s\n' "$want" >"$cnf"
  fi
  wait_for "MariaDB" 60 mariadb-admin ping
  if ! binlog_ready; then
    log "restarting MariaDB to enable the binlog (was: $(binlog_settings))"
    mariadb-admin shutdown
    wait_for "MariaDB shutdown" 60 bash -c '! pgrep -x mariadbd'
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
    wait_for "MariaDB" 60 mariadb-admin ping
    binlog_ready || { log "MariaDB settings still wrong after restart: $(binlog_settings)"; exit 1; }
  fi
  # Tests and the demo connect as root over TCP with an empty password.
  if ! mariadb -uroot -h127.0.0.1 --protocol=TCP -e 'SELECT 1' >/dev/null 2>&1; then
    mysql_q "ALTER USER root@localhost IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket"
  fi
  mysql_q "CREATE DATABASE IF NOT EXISTS test"
  log "MariaDB ready: $(mysql_q 'SELECT VERSION()'), binlog ROW/FULL/FULL"
}

prepare_postgres() {
  local ver
  ver=$(ls /etc/postgresql | sort -n | tail -1)
  wait_for "PostgreSQL" 60 pg_isready -h 127.0.0.1 -p 5432
  local cur
  cur=$(psql -U postgres -h 127.0.0.1 -Atc 'SHOW wal_level')
  if [ "$cur" != "logical" ]; then
    log "restarting PostgreSQL $ver to set wal_level=logical (was: $cur)"
    psql -U postgres -h 127.0.0.1 -qc "ALTER SYSTEM SET wal_level = 'logical'"
    pg_ctlcluster --skip-systemctl-redirect "$ver" main restart
    wait_for "PostgreSQL" 60 pg_isready -h 127.0.0.1 -p 5432
    cur=$(psql -U postgres -h 127.0.0.1 -Atc 'SHOW wal_level')
    [ "$cur" = "logical" ] || { log "wal_level still $cur after restart"; exit 1; }
  fi
  psql -U postgres -h 127.0.0.1 -Atc "SELECT 1 FROM pg_database WHERE datname='test'" | grep -q 1 ||
    psql -U postgres -h 127.0.0.1 -qc 'CREATE DATABASE test'
  log "PostgreSQL ready: $(psql -U postgres -h 127.0.0.1 -Atc 'SHOW server_version'), wal_level=logical"
}

case "${1:-all}" in
  mariadb|mysql) prepare_mariadb ;;
  postgres) prepare_postgres ;;
  all) prepare_mariadb; prepare_postgres ;;
  *) echo "usage: $0 [all|mariadb|postgres]" >&2; exit 2 ;;
esac
