#!/usr/bin/env bash
# Both ends of the outbox with the kit, on this machine: the order service
# (examples/orders-service, outboxwriter) writes orders and their events to
# MariaDB, outbox-cdc delivers them (and is killed with SIGKILL midway, so
# duplicates arrive), and a consumer (examples/consume-$CLIENT,
# outboxconsumer) applies each event exactly once to its own database.
# Run it through `make example-<client>`, which builds bin/ and prepares
# the services first.
#   CLIENT: sarama | franz (Kafka, a local Kafka-protocol broker), amqp
#           (RabbitMQ), nats (NATS JetStream), redis (Redis Streams)
#   MODE:   dedupe (processed-messages table) | redis (Redis pre-filter +
#           table) | machine (state machine alone)
set -euo pipefail
cd "$(dirname "$0")/.."

CLIENT=${CLIENT:-franz}
MODE=${MODE:-dedupe}
ORDERS=${ORDERS:-20}
case "$CLIENT" in sarama|franz|amqp|nats|redis) ;; *) echo "CLIENT=$CLIENT: want sarama, franz, amqp, nats or redis" >&2; exit 2 ;; esac
case "$MODE" in dedupe|redis|machine) ;; *) echo "MODE=$MODE: want dedupe, redis or machine" >&2; exit 2 ;; esac
RABBITMQ_URL=${DEMO_RABBITMQ_URL:-amqp://guest:guest@127.0.0.1:5672/}
NATS_URL=${DEMO_NATS_URL:-nats://127.0.0.1:4222}
REDIS_ADDR=${DEMO_REDIS_ADDR:-127.0.0.1:6379}
KAFKA_PORT=${DEMO_KAFKA_PORT:-19093}
HTTP_ADDR=${DEMO_HTTP:-127.0.0.1:19465}
DB=${EXAMPLE_DB:-outbox_example}
CDB=${EXAMPLE_CONSUMER_DB:-outbox_example_consumer}
run_id=$$
work=$(mktemp -d /tmp/outbox-cdc-example.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
say() { printf '\n== %s\n' "$*"; }

say "creating the service's database $DB and the consumer's database $CDB in MariaDB"
mariadb -uroot -e "DROP DATABASE IF EXISTS $DB; CREATE DATABASE $DB; DROP DATABASE IF EXISTS $CDB; CREATE DATABASE $CDB;"
# The service creates its tables: orders, outbox_message (schema/mysql.sql
# plus the aggregate_seq column) and outbox_sequence.
bin/orders-service -db "root:@tcp(127.0.0.1:3306)/$DB" -orders 0 >/dev/null

consumer_args=(-mode "$MODE" -redis "$REDIS_ADDR" -db "root:@tcp(127.0.0.1:3306)/$CDB" -name "example_$MODE" -idle 5s)
case "$CLIENT" in
sarama|franz)
  say "starting a Kafka-protocol broker (kfake) on 127.0.0.1:$KAFKA_PORT"
  bin/kfake-broker -port "$KAFKA_PORT" -topics outbox.event.ORDER >"$work/broker.log" 2>&1 &
  pids+=($!)
  sink_yaml="  type: kafka
  brokers: [\"127.0.0.1:$KAFKA_PORT\"]"
  topic='outbox.event.{aggregate_type}'
  consumer_args+=(-brokers "127.0.0.1:$KAFKA_PORT" -topic outbox.event.ORDER -group "example-$run_id")
  ;;
amqp)
  exchange="outbox-example-$run_id"
  sink_yaml="  type: rabbitmq
  url: \"$RABBITMQ_URL\"
  exchange: $exchange
  declare: true"
  topic='{aggregate_type}'
  consumer_args+=(-url "$RABBITMQ_URL" -exchange "$exchange" -queue "outbox-example-$run_id" -delete)
  ;;
nats)
  stream="OUTBOX_EXAMPLE_$run_id"
  sink_yaml="  type: nats
  url: \"$NATS_URL\"
  stream: $stream
  create_stream: true
  stream_storage: memory
  duplicate_window: 100ms   # shorter than the restart below, so its copies are stored again"
  topic="example$run_id.{aggregate_type}.{aggregate_id}"
  consumer_args+=(-url "$NATS_URL" -stream "$stream")
  ;;
redis)
  prefix="outbox-example-$run_id:"
  sink_yaml="  type: redis
  url: \"redis://$REDIS_ADDR/0\"
  max_len: 100000"
  topic="$prefix{aggregate_type}"
  consumer_args+=(-url "redis://$REDIS_ADDR/0" -stream "${prefix}ORDER")
  ;;
esac

cat >"$work/outbox-cdc.yaml" <<YAML
name: outbox-example
source:
  type: mysql
  dsn: "root:@tcp(127.0.0.1:3306)/$DB"
  table: outbox_message
  start: latest
route:
  preset: seed
  topic: "$topic"
  headers: [aggregate_seq]        # the per-order sequence the writer numbers
sink:
$sink_yaml
pipeline:
  checkpoint_interval: 2s         # a long interval: the kill below re-sends up to 2 s of events
checkpoint:
  type: file
  path: $work/outbox-cdc.checkpoint
http:
  listen: $HTTP_ADDR
log:
  format: json
YAML

start_cdc() {
  bin/outbox-cdc run --config "$work/outbox-cdc.yaml" >>"$work/outbox-cdc.log" 2>&1 &
  cdc=$!
  pids+=($cdc)
  for _ in $(seq 1 100); do
    curl -fsS "http://$HTTP_ADDR/readyz" >/dev/null 2>&1 && return
    kill -0 "$cdc" 2>/dev/null || { cat "$work/outbox-cdc.log"; echo "outbox-cdc exited" >&2; exit 1; }
    sleep 0.1
  done
  echo "outbox-cdc not ready" >&2; exit 1
}
start_consumer() {
  say "starting the consumer: bin/consume-$CLIENT ${consumer_args[*]}"
  bin/consume-"$CLIENT" "${consumer_args[@]}" >"$work/consumer.txt" 2>"$work/consumer.log" &
  consumer=$!
  pids+=($consumer)
  for _ in $(seq 1 100); do grep -q ready "$work/consumer.log" 2>/dev/null && break; sleep 0.1; done
}

# RabbitMQ keeps nothing for a queue that does not exist yet: its consumer
# binds its queue first. The others read from the start of what is stored.
[ "$CLIENT" = amqp ] && start_consumer
say "starting outbox-cdc (config: $work/outbox-cdc.yaml, log: $work/outbox-cdc.log)"
start_cdc

say "the order service takes $ORDERS orders through their lives (output: $work/service.txt)"
bin/orders-service -db "root:@tcp(127.0.0.1:3306)/$DB" -orders "$ORDERS" -pause 40ms >"$work/service.txt" &
service=$!
sleep 1.5
[ "$CLIENT" = amqp ] || start_consumer
sleep 1
say "killing outbox-cdc with SIGKILL mid-run, and starting it again from its checkpoint"
kill -KILL "$cdc"; wait "$cdc" 2>/dev/null || true
sleep 0.3
start_cdc
wait "$service"
tail -n 6 "$work/service.txt"
committed=$(sed -n 's/^committed \([0-9]*\) events.*/\1/p' "$work/service.txt")

say "waiting for the consumer (it stops 5 s after the last message)"
rc=0; wait "$consumer" || rc=$?
grep -v '^ready$' "$work/consumer.log" | head -n 5 || true
cat "$work/consumer.txt"
applied=$(sed -n 's/^applied \([0-9]*\) events.*/\1/p' "$work/consumer.txt")
kill -TERM "$cdc"; wait "$cdc" 2>/dev/null || true
case "$CLIENT" in
redis) redis-cli -h "${REDIS_ADDR%:*}" -p "${REDIS_ADDR#*:}" DEL "${prefix}ORDER" >/dev/null ;;
nats) bin/consume -nats "$NATS_URL" -stream "$stream" -n 0 -timeout 1s -delete >/dev/null 2>&1 || true ;;
esac
echo
if [ "$rc" -eq 0 ] && [ "${applied:-x}" = "${committed:-y}" ]; then
  echo "example finished: the service committed $committed events and the consumer applied each of them exactly once ($CLIENT, mode $MODE); files in $work"
else
  echo "example FAILED: committed ${committed:-?}, applied ${applied:-?}, consumer exit $rc; files in $work" >&2
  exit 1
fi
