#!/usr/bin/env bash
# Makes the local MariaDB and PostgreSQL ready for change data capture.
# Idempotent: it changes configuration and restarts a server only when a
# setting is missing. Needs root (it edits /etc and restarts the servers).
#
#   prepare-services.sh [all]   what `make test` needs: everything below
#   prepare-services.sh demo    what `make demo` needs: the MariaDB binlog
#                               settings only (no TLS, no PostgreSQL, no
#                               brokers), restarting MariaDB only when a
#                               binlog setting is missing
#
#   MariaDB:    server_id, log_bin, binlog_format=ROW, binlog_row_image=FULL,
#               binlog_row_metadata=FULL in $CONF_DIR/mariadb.conf.d/60-outbox-cdc.cnf
#               (included from $CONF_DIR/my.cnf, also when my.cnf is all
#               there is); root may log in over TCP without a password.
#   PostgreSQL: wal_level=logical.
#   kcat:       installed from Debian's packages when missing (e2e tests).
#   promtool:   Prometheus' rule tester (test/e2e/idle_lag_test.go evaluates
#               deploy/prometheus/alerts.yaml with it), built with
#               `go install` into $(go env GOPATH)/bin when missing there and
#               on $PATH (the first build takes minutes; later runs do nothing).
#   Brokers:    RabbitMQ (5672), NATS with JetStream (4222) and Redis (6379)
#               run on the machine already; this only waits for them to
#               answer and installs redis-cli (redis-tools) when missing.
#               It enables RabbitMQ's rabbitmq_consistent_hash_exchange and
#               rabbitmq_stream plugins when they are off (the
#               consistent-hash routing and stream queue tests); it changes
#               no other broker setting.
#   Both (tests only): TLS with a test CA and server certificate generated
#               once in $TLS_DIR (default /etc/outbox-cdc-test-tls; SAN
#               localhost and 127.0.0.1), MariaDB's in
#               mariadb.conf.d/61-outbox-cdc-tls.cnf; tests find the CA as
#               $TLS_DIR/ca.pem. Plaintext connections keep working
#               (require_secure_transport stays off, pg_hba keeps its host lines).
set -euo pipefail

TLS_DIR=${OUTBOX_CDC_TEST_TLS_DIR:-/etc/outbox-cdc-test-tls}
# CONF_DIR holds MariaDB's my.cnf (Debian: /etc/mysql).
CONF_DIR=${OUTBOX_CDC_MYSQL_CONF_DIR:-/etc/mysql}

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

# prepare_tls makes a test CA and a server certificate signed by it, unless
# valid ones exist. The private key is copied once per server, owned by its
# user (PostgreSQL refuses a key others can read).
prepare_tls() {
  mkdir -p "$TLS_DIR"
  chmod 755 "$TLS_DIR"
  local d=$TLS_DIR
  if [ -f "$d/ca.pem" ] && [ -f "$d/server.pem" ] &&
    openssl verify -CAfile "$d/ca.pem" "$d/server.pem" >/dev/null 2>&1 &&
    openssl x509 -checkend 2592000 -noout -in "$d/server.pem" >/dev/null; then
    :
  else
    log "generating the test CA and server certificate in $d"
    local tmp
    tmp=$(mktemp -d)
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=outbox-cdc test CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -keyout "$tmp/ca.key" -out "$tmp/ca.pem" 2>/dev/null
    openssl req -new -newkey rsa:2048 -nodes -subj "/CN=localhost" \
      -keyout "$tmp/server.key" -out "$tmp/server.csr" 2>/dev/null
    printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=serverAuth" "subjectAltName=DNS:localhost,IP:127.0.0.1" >"$tmp/ext.cnf"
    openssl x509 -req -in "$tmp/server.csr" -CA "$tmp/ca.pem" -CAkey "$tmp/ca.key" -CAcreateserial \
      -days 3650 -extfile "$tmp/ext.cnf" -out "$tmp/server.pem" 2>/dev/null
    install -m 600 "$tmp/ca.key" "$d/ca.key"
    install -m 644 "$tmp/ca.pem" "$d/ca.pem"
    install -m 644 "$tmp/server.pem" "$d/server.pem"
    install -m 600 "$tmp/server.key" "$d/server.key"
    rm -rf "$tmp"
    rm -f "$d/mariadb-server.key" "$d/postgres-server.key"
  fi
  local u
  for u in mysql postgres; do
    local k=$d/${u/mysql/mariadb}-server.key
    if id "$u" >/dev/null 2>&1 && { [ ! -f "$k" ] || ! cmp -s "$d/server.key" "$k"; }; then
      install -m 600 -o "$u" -g "$u" "$d/server.key" "$k"
    fi
  done
}

mariadb_tls_ready() { [ "$(mysql_q "SELECT CONCAT(@@have_ssl, ',', @@ssl_cert)")" = "YES,$TLS_DIR/server.pem" ]; }

binlog_settings() { mysql_q "SELECT CONCAT_WS(',', @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata)"; }
binlog_ready() { case "$(binlog_settings)" in 1,ROW,FULL,FULL | ON,ROW,FULL,FULL) return 0 ;; esac; return 1; }

# write_if_changed FILE CONTENT writes CONTENT to FILE unless it holds it.
write_if_changed() {
  if [ ! -f "$1" ] || [ "$(cat "$1")" != "$2" ]; then
    printf '%s\n' "$2" >"$1"
  fi
}

# prepare_mariadb [tls]: the binlog settings, and with "tls" the test
# certificate. Without tls (the demo) it writes nothing while the binlog is
# already right, so it never undoes what a test run configured.
prepare_mariadb() {
  local tls=${1:-} cnf_dir=$CONF_DIR/mariadb.conf.d
  local cnf=$cnf_dir/60-outbox-cdc.cnf tls_cnf=$cnf_dir/61-outbox-cdc-tls.cnf
  local want want_tls
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
  want_tls=$(cat <<'CNF'
# Written by outbox-cdc scripts/prepare-services.sh (the TLS tests)
[mysqld]
ssl_ca              = TLSDIR/ca.pem
ssl_cert            = TLSDIR/server.pem
ssl_key             = TLSDIR/mariadb-server.key
CNF
)
  want_tls=${want_tls//TLSDIR/$TLS_DIR}
  if ! mariadb-admin ping >/dev/null 2>&1; then
    # Down (an interrupted earlier restart, say): start the system server.
    log "MariaDB does not answer; starting it"
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
    start-stop-daemon --start --oknodo --background --pidfile /run/mysqld/mysqld.pid --exec /usr/sbin/mariadbd
  fi
  wait_for "MariaDB" 60 mariadb-admin ping
  if [ -n "$tls" ] || ! binlog_ready; then
    mkdir -p "$cnf_dir"
    if [ -f "$CONF_DIR/my.cnf" ] && ! grep -Eq "^!includedir[[:space:]]+$cnf_dir/?\$" "$CONF_DIR/my.cnf"; then
      printf '\n!includedir %s/\n' "$cnf_dir" >>"$CONF_DIR/my.cnf"
    fi
    write_if_changed "$cnf" "$want"
    [ -z "$tls" ] || write_if_changed "$tls_cnf" "$want_tls"
  fi
  if ! binlog_ready || { [ -n "$tls" ] && ! mariadb_tls_ready; }; then
    log "restarting MariaDB to enable the binlog${tls:+ and TLS} (was: $(binlog_settings), ssl: $(mysql_q 'SELECT @@have_ssl'))"
    # Only the system server: tests may run private mariadbd processes
    # beside it, which neither the wait nor the start may mistake for it.
    pidfile=$(mysql_q 'SELECT @@pid_file')
    pid=$(cat "$pidfile" 2>/dev/null || true)
    mariadb-admin shutdown
    if [ -n "$pid" ]; then
      wait_for "MariaDB shutdown" 60 bash -c "! kill -0 $pid 2>/dev/null"
    else
      wait_for "MariaDB shutdown" 60 bash -c '! mariadb-admin ping >/dev/null 2>&1'
    fi
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
    start-stop-daemon --start --oknodo --background --pidfile "${pidfile:-/run/mysqld/mysqld.pid}" --exec /usr/sbin/mariadbd
    wait_for "MariaDB" 60 mariadb-admin ping
    binlog_ready || { log "MariaDB settings still wrong after restart: $(binlog_settings)"; exit 1; }
    [ -z "$tls" ] || mariadb_tls_ready || { log "MariaDB TLS still off after restart (have_ssl: $(mysql_q 'SELECT @@have_ssl'))"; exit 1; }
  fi
  if [ -n "$tls" ]; then
    # A regenerated certificate at the same paths is loaded without a restart.
    if ! mariadb --ssl-verify-server-cert --ssl-ca="$TLS_DIR/ca.pem" -uroot -h127.0.0.1 --protocol=TCP -e 'SELECT 1' >/dev/null 2>&1; then
      mysql_q "FLUSH SSL"
    fi
  fi
  # Tests and the demo connect as root over TCP with an empty password.
  if ! mariadb -uroot -h127.0.0.1 --protocol=TCP -e 'SELECT 1' >/dev/null 2>&1; then
    mysql_q "ALTER USER root@localhost IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket"
  fi
  mysql_q "CREATE DATABASE IF NOT EXISTS test"
  log "MariaDB ready: $(mysql_q 'SELECT VERSION()'), binlog ROW/FULL/FULL${tls:+, TLS with $TLS_DIR/ca.pem}"
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
  # TLS: ssl and the certificate files are reloadable, no restart needed.
  local want_tls="on,$TLS_DIR/server.pem,$TLS_DIR/postgres-server.key"
  cur=$(psql -U postgres -h 127.0.0.1 -Atc "SELECT current_setting('ssl') || ',' || current_setting('ssl_cert_file') || ',' || current_setting('ssl_key_file')")
  if [ "$cur" != "$want_tls" ] ||
    ! psql "host=127.0.0.1 user=postgres dbname=postgres sslmode=verify-full sslrootcert=$TLS_DIR/ca.pem" -Atc 'SELECT 1' >/dev/null 2>&1; then
    log "PostgreSQL: serving TLS with the test certificate (was: $cur)"
    psql -U postgres -h 127.0.0.1 -q \
      -c "ALTER SYSTEM SET ssl = on" \
      -c "ALTER SYSTEM SET ssl_cert_file = '$TLS_DIR/server.pem'" \
      -c "ALTER SYSTEM SET ssl_key_file = '$TLS_DIR/postgres-server.key'" \
      -c "SELECT pg_reload_conf()" >/dev/null
    wait_for "PostgreSQL TLS" 10 psql "host=127.0.0.1 user=postgres dbname=postgres sslmode=verify-full sslrootcert=$TLS_DIR/ca.pem" -Atc 'SELECT 1'
  fi
  psql -U postgres -h 127.0.0.1 -Atc "SELECT 1 FROM pg_database WHERE datname='test'" | grep -q 1 ||
    psql -U postgres -h 127.0.0.1 -qc 'CREATE DATABASE test'
  log "PostgreSQL ready: $(psql -U postgres -h 127.0.0.1 -Atc 'SHOW server_version'), wal_level=logical, TLS with $TLS_DIR/ca.pem"
}

# kcat (librdkafka's command-line client) is the independent consumer the
# e2e tests compare record bytes with (test/e2e/debezium_test.go).
prepare_kcat() {
  if command -v kcat >/dev/null 2>&1; then return 0; fi
  log "installing kcat (Debian package) for the e2e byte comparisons"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null 2>&1; then
    apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null || { log "cannot install kcat"; exit 1; }
  fi
}

# promtool evaluates the shipped alert rules in the e2e tests. Taken from
# Debian's prometheus package without installing it (no service is set up:
# only the promtool binary is extracted into /usr/local/bin), else built
# from source into GOBIN (slow: many minutes on 2 busy cores).
PROMTOOL_VERSION=v0.316.0
prepare_promtool() {
  local bin tmp
  bin="$(go env GOBIN)"
  [ -n "$bin" ] || bin="$(go env GOPATH)/bin"
  if command -v promtool >/dev/null 2>&1 || [ -x "$bin/promtool" ]; then return 0; fi
  tmp=$(mktemp -d)
  if (cd "$tmp" && { apt-get download prometheus >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null 2>&1 && apt-get download prometheus >/dev/null 2>&1; }; }) &&
    dpkg -x "$tmp"/prometheus_*.deb "$tmp/x" && [ -x "$tmp/x/usr/bin/promtool" ]; then
    install -m 0755 "$tmp/x/usr/bin/promtool" /usr/local/bin/promtool
    rm -rf "$tmp"
    log "promtool from Debian's prometheus package: $(/usr/local/bin/promtool --version 2>&1 | head -1)"
    return 0
  fi
  rm -rf "$tmp"
  log "building promtool $PROMTOOL_VERSION into $bin (no Debian package; takes many minutes)"
  GOFLAGS=-mod=mod go install "github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_VERSION" ||
    { log "cannot build promtool"; exit 1; }
}

# prepare_brokers waits for the brokers the sink tests use (test/sinktest,
# sink/*) and makes sure redis-cli, the contract's Redis consumer, exists.
prepare_brokers() {
  local b
  for b in RabbitMQ:5672 NATS:4222 Redis:6379; do
    wait_for "${b%%:*} on 127.0.0.1:${b##*:}" 60 bash -c "exec 3<>/dev/tcp/127.0.0.1/${b##*:}"
  done
  if ! command -v redis-cli >/dev/null 2>&1; then
    log "installing redis-cli (Debian package redis-tools) for the sink contract tests"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-tools >/dev/null 2>&1 || {
      apt-get update -qq >/dev/null 2>&1 || true
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-tools >/dev/null || { log "cannot install redis-cli"; exit 1; }
    }
  fi
  prepare_rabbitmq_plugins
  log "brokers answer: RabbitMQ 5672, NATS 4222, Redis 6379"
}

# prepare_rabbitmq_plugins enables the plugins the RabbitMQ tests need,
# only those not yet enabled (enabling is idempotent, but each call costs
# seconds). Online when the node answers; --offline writes the enabled
# plugins file for a node that is not running (it loads them at start).
RABBITMQ_PLUGINS="rabbitmq_consistent_hash_exchange rabbitmq_stream"
prepare_rabbitmq_plugins() {
  if ! command -v rabbitmq-plugins >/dev/null 2>&1; then
    log "rabbitmq-plugins not found: RabbitMQ runs elsewhere; enable $RABBITMQ_PLUGINS there"
    return 0
  fi
  local enabled missing="" p
  enabled=$(rabbitmq-plugins list -e -m 2>/dev/null || true)
  for p in $RABBITMQ_PLUGINS; do
    grep -qx "$p" <<<"$enabled" || missing="$missing $p"
  done
  [ -n "$missing" ] || return 0
  log "enabling RabbitMQ plugins:$missing"
  # shellcheck disable=SC2086
  if ! rabbitmq-plugins enable $missing >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    rabbitmq-plugins enable --offline $missing >/dev/null || { log "cannot enable RabbitMQ plugins:$missing"; exit 1; }
  fi
  wait_for "RabbitMQ on 127.0.0.1:5672" 60 bash -c "exec 3<>/dev/tcp/127.0.0.1/5672"
}

case "${1:-all}" in
  demo) prepare_mariadb ;;
  mariadb|mysql) prepare_tls; prepare_mariadb tls ;;
  postgres) prepare_tls; prepare_postgres ;;
  kcat) prepare_kcat ;;
  promtool) prepare_promtool ;;
  brokers) prepare_brokers ;;
  all) prepare_tls; prepare_mariadb tls; prepare_postgres; prepare_kcat; prepare_promtool; prepare_brokers ;;
  *) echo "usage: $0 [all|demo|mariadb|postgres|kcat|promtool|brokers]" >&2; exit 2 ;;
esac
