#!/usr/bin/env bash
# The main job end to end on this machine: local MariaDB (binlog on) ->
# outbox-cdc -> a local Kafka-protocol broker -> a consumer that prints what
# arrived. Run it through `make demo`, which builds bin/ and prepares the
# services first.
set -euo pipefail
cd "$(dirname "$0")/.."

KAFKA_PORT=${DEMO_KAFKA_PORT:-19092}
HTTP_ADDR=${DEMO_HTTP:-127.0.0.1:19464}
DB=${DEMO_DB:-outbox_demo}
work=$(mktemp -d /tmp/outbox-cdc-demo.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

say() { printf '\n== %s\n' "$*"; }

say "starting a Kafka-protocol broker (kfake) on 127.0.0.1:$KAFKA_PORT"
bin/kfake-broker -port "$KAFKA_PORT" >"$work/broker.log" 2>&1 &
pids+=($!)

say "creating database $DB and its outbox table in MariaDB"
mariadb -uroot <<SQL
DROP DATABASE IF EXISTS $DB;
CREATE DATABASE $DB;
USE $DB;
CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, order_no VARCHAR(32) NOT NULL, amount DECIMAL(10,2) NOT NULL);
CREATE TABLE outbox_message (
  id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,
  message_id VARCHAR(64) NOT NULL,
  aggregate_type VARCHAR(64) NOT NULL,
  aggregate_id VARCHAR(64) NOT NULL,
  event_type VARCHAR(64) NOT NULL,
  payload JSON NOT NULL,
  status TINYINT NOT NULL DEFAULT 0,
  retry_count INT NOT NULL DEFAULT 0,
  next_retry_at DATETIME DEFAULT NULL,
  created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  updated_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  INDEX idx_status_next_retry (status, next_retry_at),
  INDEX idx_aggregate (aggregate_type, aggregate_id),
  UNIQUE KEY uk_message_id (message_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
SQL

cat >"$work/outbox-cdc.yaml" <<YAML
name: outbox-demo
source:
  type: mysql
  dsn: "root:@tcp(127.0.0.1:3306)/$DB"
  table: outbox_message
  start: latest
route:
  preset: seed
  topic: "outbox.event.{aggregate_type}"
sink:
  type: kafka
  brokers: ["127.0.0.1:$KAFKA_PORT"]
checkpoint:
  type: file
  path: $work/outbox-cdc.checkpoint
http:
  listen: $HTTP_ADDR
log:
  format: json
YAML

say "starting outbox-cdc (config: $work/outbox-cdc.yaml, log: $work/outbox-cdc.log)"
bin/outbox-cdc run --config "$work/outbox-cdc.yaml" >"$work/outbox-cdc.log" 2>&1 &
cdc=$!
pids+=($cdc)
for _ in $(seq 1 100); do
  curl -fsS "http://$HTTP_ADDR/readyz" >/dev/null 2>&1 && break
  kill -0 "$cdc" 2>/dev/null || { cat "$work/outbox-cdc.log"; echo "outbox-cdc exited" >&2; exit 1; }
  sleep 0.1
done
curl -fsS "http://$HTTP_ADDR/readyz"

say "placing orders: business row + outbox row in one transaction (and one rolled back)"
mariadb -uroot "$DB" <<'SQL'
BEGIN;
INSERT INTO orders (order_no, amount) VALUES ('A-1001', 42.50);
INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload)
VALUES (UUID(), 'ORDER', 'A-1001', 'ORDER_CREATED', '{"order_no":"A-1001","amount":42.50}');
COMMIT;
BEGIN;
INSERT INTO orders (order_no, amount) VALUES ('A-1002', 7.00);
INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload)
VALUES (UUID(), 'ORDER', 'A-1002', 'ORDER_CREATED', '{"order_no":"A-1002","amount":7.00}'),
       (UUID(), 'PAYMENT', 'A-1002', 'PAYMENT_REQUESTED', '{"order_no":"A-1002","amount":7.00}');
COMMIT;
BEGIN;
INSERT INTO orders (order_no, amount) VALUES ('A-1003', 99.00);
INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload)
VALUES (UUID(), 'ORDER', 'A-1003', 'ORDER_CREATED', '{"order_no":"A-1003"}');
ROLLBACK;
INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload)
VALUES (UUID(), 'ORDER', 'A-1001', 'ORDER_PAID', '{"order_no":"A-1001"}');
UPDATE outbox_message SET status = 1;
SQL

say "records consumed from Kafka (read_committed): 4 expected, none from the rolled-back order"
bin/consume -brokers "127.0.0.1:$KAFKA_PORT" -regex 'outbox\.event\..*' -n 4 -timeout 20s
sleep 0.5

say "metrics"
curl -fsS "http://$HTTP_ADDR/metrics" | grep -E '^outbox_cdc_(source_events|source_skipped|records_delivered|checkpoint_saves)' || true

say "stopping outbox-cdc with SIGTERM (drain, checkpoint, exit 0)"
kill -TERM "$cdc"
rc=0; wait "$cdc" || rc=$?
echo "outbox-cdc exit status: $rc; checkpoint: $(head -c 300 "$work/outbox-cdc.checkpoint" | tr '\n' ' ')"
[ "$rc" -eq 0 ]
echo
echo "demo finished; files in $work"
