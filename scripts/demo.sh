#!/usr/bin/env bash
# The main job end to end on this machine: local MariaDB (binlog on) ->
# outbox-cdc -> a broker -> a consumer that prints what arrived. Run it
# through `make demo`, which builds bin/ and turns the MariaDB binlog on
# first (scripts/prepare-services.sh demo; no TLS).
#
# Every name and address can be overridden (README.md, "Two commands"):
#   SINK                  kafka (default: a Kafka-protocol broker started
#                         here), rabbitmq, nats or redis (running services),
#                         or sqs (the goaws SQS emulator, built with go
#                         install from the module proxy and started here
#                         on a free port, FIFO queues)
#                         or sns (the fauxqs SNS/SQS emulator, installed
#                         with npm ci from test/testenv/fauxqs and started
#                         here on a free port: FIFO topics, each with a
#                         FIFO queue subscription read back)
#                         or http (webhooks to test/webhook/receiver.py, a
#                         receiver in Python started here that checks the
#                         signatures)
#   DEMO_DB               the MariaDB database created, then dropped at the
#                         end (default outbox_demo_<pid>; an existing one is
#                         refused)
#   DEMO_NAME             the connector name, which derives its server_id
#                         (default outbox-demo-<pid>)
#   DEMO_MYSQL_HOST, DEMO_MYSQL_PORT
#                         the MariaDB server, as root without a password
#                         (default 127.0.0.1 and 3306)
#   DEMO_KAFKA_PORT       the demo broker's port (default: a free one)
#   DEMO_HTTP             outbox-cdc's http.listen (default 127.0.0.1:0, a
#                         free port)
#   DEMO_RABBITMQ_URL, DEMO_NATS_URL, DEMO_REDIS_HOST, DEMO_REDIS_PORT
#                         the brokers (default: the local ones, standard ports)
#   DEMO_KEEP=1           keep the database, stream or keys afterwards
#   DEMO_BIN              where outbox-cdc, kfake-broker and consume are
#                         (default bin, what make build writes)
set -euo pipefail
cd "$(dirname "$0")/.."

SINK=${SINK:-kafka}
BIN=${DEMO_BIN:-bin}
RABBITMQ_URL=${DEMO_RABBITMQ_URL:-amqp://guest:guest@127.0.0.1:5672/}
NATS_URL=${DEMO_NATS_URL:-nats://127.0.0.1:4222}
REDIS_HOST=${DEMO_REDIS_HOST:-127.0.0.1}
REDIS_PORT=${DEMO_REDIS_PORT:-6379}
case "$SINK" in kafka|rabbitmq|nats|redis|sqs|sns|http) ;; *) echo "SINK=$SINK: want kafka, rabbitmq, nats, redis, sqs, sns or http" >&2; exit 2 ;; esac
run_id=$$

KAFKA_PORT=${DEMO_KAFKA_PORT:-0}
HTTP_ADDR=${DEMO_HTTP:-127.0.0.1:0}
DB=${DEMO_DB:-outbox_demo_$run_id}
NAME=${DEMO_NAME:-outbox-demo-$run_id}
MYSQL_HOST=${DEMO_MYSQL_HOST:-127.0.0.1}
MYSQL_PORT=${DEMO_MYSQL_PORT:-3306}
case "$DB" in *[!A-Za-z0-9_]*) echo "DEMO_DB=$DB: letters, digits and _ only" >&2; exit 2 ;; esac
sql() { mariadb -uroot -h"$MYSQL_HOST" -P"$MYSQL_PORT" --protocol=TCP "$@"; }
if [ "$SINK" = redis ] && ! command -v redis-cli >/dev/null; then
  echo "SINK=redis reads the streams with redis-cli: install it (Debian: redis-tools; make services does)" >&2
  exit 2
fi
if [ "$SINK" = sns ] && ! command -v npm >/dev/null; then
  echo "SINK=sns runs the fauxqs emulator: install Node.js and npm" >&2
  exit 2
fi
if [ "$SINK" = http ] && ! command -v python3 >/dev/null; then
  echo "SINK=http receives the webhooks with test/webhook/receiver.py: install python3" >&2
  exit 2
fi
work=$(mktemp -d /tmp/outbox-cdc-demo.XXXXXX)
pids=()
created_db=
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -n "$created_db" ] && [ "${DEMO_KEEP:-}" != 1 ]; then
    sql -e "DROP DATABASE IF EXISTS \`$DB\`" || true
  fi
}
trap cleanup EXIT

say() { printf '\n== %s\n' "$*"; }

case "$SINK" in
kafka)
  "$BIN"/kfake-broker -port "$KAFKA_PORT" >"$work/broker.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do grep -q 'listening on' "$work/broker.log" 2>/dev/null && break; sleep 0.1; done
  KAFKA_PORT=$(sed -n 's/.*listening on \[127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/broker.log")
  [ -n "$KAFKA_PORT" ] || { cat "$work/broker.log" >&2; echo "the demo broker did not start" >&2; exit 1; }
  say "started a Kafka-protocol broker (kfake) on 127.0.0.1:$KAFKA_PORT"
  sink_yaml="  type: kafka
  brokers: [\"127.0.0.1:$KAFKA_PORT\"]"
  topic='outbox.event.{aggregate_type}'
  ;;
rabbitmq)
  exchange="outbox-demo-$run_id"
  say "binding a queue to exchange $exchange on RabbitMQ (the consumer, started first: RabbitMQ keeps nothing for queues that do not exist yet)"
  "$BIN"/consume -rabbitmq "$RABBITMQ_URL" -exchange "$exchange" -n 4 -timeout 60s >"$work/consumed.txt" 2>"$work/consume.log" &
  consumer=$!
  pids+=($consumer)
  for _ in $(seq 1 100); do grep -q ready "$work/consume.log" 2>/dev/null && break; sleep 0.1; done
  sink_yaml="  type: rabbitmq
  url: \"$RABBITMQ_URL\"
  exchange: $exchange"
  topic='{aggregate_type}'
  ;;
nats)
  stream="OUTBOX_DEMO_$run_id"
  sink_yaml="  type: nats
  url: \"$NATS_URL\"
  stream: $stream
  create_stream: true
  stream_storage: memory"
  topic="demo$run_id.{aggregate_type}.{aggregate_id}"
  ;;
sqs)
  # goaws speaks the AWS query protocol only (sink.protocol: query); it
  # checks no credentials, but the AWS SDK wants some.
  mkdir -p "$BIN/goaws"
  [ -x "$BIN/goaws/cmd" ] || GOBIN="$(cd "$BIN" && pwd)/goaws" GOFLAGS=-mod=mod go install github.com/Admiral-Piett/goaws/app/cmd@v0.4.5
  SQS_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  cat >"$work/goaws.yaml" <<YAML
Local:
  Host: 127.0.0.1
  Port: $SQS_PORT
  Region: us-east-1
  AccountId: "100010001000"
  Queues:
    - Name: outbox-demo-ORDER.fifo
    - Name: outbox-demo-PAYMENT.fifo
YAML
  "$BIN"/goaws/cmd -config "$work/goaws.yaml" Local >"$work/goaws.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$SQS_PORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
  say "started the goaws SQS emulator on 127.0.0.1:$SQS_PORT (FIFO queues outbox-demo-ORDER.fifo, outbox-demo-PAYMENT.fifo)"
  export AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo AWS_EC2_METADATA_DISABLED=true
  sink_yaml="  type: sqs
  region: us-east-1
  endpoint: \"http://127.0.0.1:$SQS_PORT\"
  protocol: query"
  topic='outbox-demo-{aggregate_type}.fifo'
  ;;
sns)
  # fauxqs: an SNS and SQS emulator (Node.js), pinned by the lock file in
  # test/testenv/fauxqs; it checks no credentials, but the AWS SDK wants
  # some. SNS topics deliver to the SQS queues subscribed to them.
  mkdir -p "$BIN/fauxqs"
  cp test/testenv/fauxqs/package.json test/testenv/fauxqs/package-lock.json test/testenv/fauxqs/serve.mjs "$BIN/fauxqs/"
  [ -f "$BIN/fauxqs/node_modules/fauxqs/package.json" ] || (cd "$BIN/fauxqs" && npm ci --no-audit --no-fund --loglevel=error)
  SNS_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  (cd "$BIN/fauxqs" && exec node serve.mjs "$SNS_PORT") >"$work/fauxqs.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$SNS_PORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
  for t in ORDER PAYMENT; do
    curl -fsS -H 'Content-Type: application/x-amz-json-1.0' -H 'X-Amz-Target: AmazonSQS.CreateQueue' \
      -d "{\"QueueName\":\"outbox-demo-$t-q.fifo\",\"Attributes\":{\"FifoQueue\":\"true\"}}" "http://127.0.0.1:$SNS_PORT/" >/dev/null
    curl -fsS -d "Action=CreateTopic&Name=outbox-demo-$t.fifo&Attributes.entry.1.key=FifoTopic&Attributes.entry.1.value=true" "http://127.0.0.1:$SNS_PORT/" >/dev/null
    curl -fsS -d "Action=Subscribe&TopicArn=arn:aws:sns:us-east-1:000000000000:outbox-demo-$t.fifo&Protocol=sqs&Endpoint=arn:aws:sqs:us-east-1:000000000000:outbox-demo-$t-q.fifo&Attributes.entry.1.key=RawMessageDelivery&Attributes.entry.1.value=true" "http://127.0.0.1:$SNS_PORT/" >/dev/null
  done
  say "started the fauxqs SNS emulator on 127.0.0.1:$SNS_PORT (FIFO topics outbox-demo-ORDER.fifo, outbox-demo-PAYMENT.fifo, each with a FIFO queue subscribed)"
  export AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo AWS_EC2_METADATA_DISABLED=true
  sink_yaml="  type: sns
  region: us-east-1
  endpoint: \"http://127.0.0.1:$SNS_PORT\""
  topic='outbox-demo-{aggregate_type}.fifo'
  ;;
redis)
  prefix="outbox-demo-$run_id:"
  sink_yaml="  type: redis
  url: \"redis://$REDIS_HOST:$REDIS_PORT/0\"
  max_len: 10000"
  topic="$prefix{aggregate_type}"
  ;;
http)
  printf 'whsec_%s\n' "$(head -c 24 /dev/urandom | base64)" >"$work/webhook-secret"
  chmod 600 "$work/webhook-secret"
  python3 test/webhook/receiver.py --out "$work/received.jsonl" --secret-file "$work/webhook-secret" >"$work/receiver.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do grep -q LISTEN "$work/receiver.log" 2>/dev/null && break; sleep 0.1; done
  recv_port=$(sed -n 's/^LISTEN \([0-9]*\)$/\1/p' "$work/receiver.log")
  [ -n "$recv_port" ] || { cat "$work/receiver.log" >&2; echo "the webhook receiver did not start" >&2; exit 1; }
  say "started a webhook receiver (test/webhook/receiver.py, checks every signature) on 127.0.0.1:$recv_port"
  sink_yaml="  type: http
  signing_secret_file: $work/webhook-secret"
  topic="http://127.0.0.1:$recv_port/hooks/{aggregate_type}"
  ;;
esac

say "creating database $DB and its outbox table in MariaDB ($MYSQL_HOST:$MYSQL_PORT; dropped at the end unless DEMO_KEEP=1)"
if [ -n "$(sql -N -B -e "SHOW DATABASES LIKE '$DB'")" ]; then
  echo "database $DB exists: the demo creates its own, pick another DEMO_DB" >&2
  exit 1
fi
sql <<SQL
CREATE DATABASE \`$DB\`;
USE \`$DB\`;
CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, order_no VARCHAR(32) NOT NULL, amount DECIMAL(10,2) NOT NULL);
SQL
created_db=1
# The outbox table's one definition (schema/mysql.sql).
sql "$DB" <schema/mysql.sql

cat >"$work/outbox-cdc.yaml" <<YAML
name: $NAME
source:
  type: mysql
  dsn: "root:@tcp($MYSQL_HOST:$MYSQL_PORT)/$DB"
  table: outbox_message
  start: latest
route:
  preset: seed
  topic: "$topic"
sink:
$sink_yaml
checkpoint:
  type: file
  path: $work/outbox-cdc.checkpoint
http:
  listen: $HTTP_ADDR
log:
  format: json
YAML

say "starting outbox-cdc (config: $work/outbox-cdc.yaml, log: $work/outbox-cdc.log)"
"$BIN"/outbox-cdc run --config "$work/outbox-cdc.yaml" >"$work/outbox-cdc.log" 2>&1 &
cdc=$!
pids+=($cdc)
# http.listen may name port 0: the log says which port it took.
for _ in $(seq 1 100); do
  addr=$(sed -n 's/.*"listen":"\([^"]*\)".*"message":"serving.*/\1/p' "$work/outbox-cdc.log" | head -1)
  [ -n "$addr" ] && break
  kill -0 "$cdc" 2>/dev/null || { cat "$work/outbox-cdc.log"; echo "outbox-cdc exited" >&2; exit 1; }
  sleep 0.1
done
[ -n "$addr" ] || { cat "$work/outbox-cdc.log"; echo "outbox-cdc serves no HTTP endpoint" >&2; exit 1; }
HTTP_ADDR=$addr
for _ in $(seq 1 100); do
  curl -fsS "http://$HTTP_ADDR/readyz" >/dev/null 2>&1 && break
  kill -0 "$cdc" 2>/dev/null || { cat "$work/outbox-cdc.log"; echo "outbox-cdc exited" >&2; exit 1; }
  sleep 0.1
done
echo "outbox-cdc answers on http://$HTTP_ADDR: $(curl -fsS "http://$HTTP_ADDR/readyz")"

say "placing orders: business row + outbox row in one transaction (and one rolled back)"
sql "$DB" <<'SQL'
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

case "$SINK" in
kafka)
  say "records consumed from Kafka (read_committed): 4 expected, none from the rolled-back order"
  "$BIN"/consume -brokers "127.0.0.1:$KAFKA_PORT" -regex 'outbox\.event\..*' -n 4 -timeout 20s
  ;;
rabbitmq)
  say "messages consumed from RabbitMQ (confirmed, mandatory, persistent): 4 expected, none from the rolled-back order"
  wait "$consumer" || { cat "$work/consume.log" >&2; exit 1; }
  cat "$work/consumed.txt"
  ;;
nats)
  say "messages read from JetStream stream $stream (Nats-Msg-Id = message id): 4 expected, none from the rolled-back order"
  "$BIN"/consume -nats "$NATS_URL" -stream "$stream" -n 4 -timeout 20s
  ;;
redis)
  say "entries read with redis-cli XRANGE from the streams $prefix*: 4 expected, none from the rolled-back order"
  for _ in $(seq 1 100); do
    n=0
    for k in $(redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" --raw KEYS "$prefix*"); do
      n=$((n + $(redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" XLEN "$k")))
    done
    [ "$n" -ge 4 ] && break
    sleep 0.2
  done
  for k in $(redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" --raw KEYS "$prefix*" | sort); do
    echo "-- $k"
    redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" --json XRANGE "$k" - +
  done
  [ "$n" -ge 4 ] || { echo "only $n of 4 entries arrived" >&2; exit 1; }
  ;;
sqs)
  say "messages received from the SQS FIFO queues (group = aggregate id, deduplication id = message id): 4 expected, none from the rolled-back order"
  n=0
  for _ in $(seq 1 100); do
    for q in outbox-demo-ORDER.fifo outbox-demo-PAYMENT.fifo; do
      # One at a time: goaws hides the messages of a locked group from a receive of several.
      while r=$(curl -fsS -d "Action=ReceiveMessage&MaxNumberOfMessages=1&MessageAttributeName.1=All&QueueUrl=http://127.0.0.1:$SQS_PORT/100010001000/$q" "http://127.0.0.1:$SQS_PORT/") &&
        body=$(sed -n 's:.*<Body>\(.*\)</Body>.*:\1:p' <<<"$r") && [ -n "$body" ]; do
        receipt=$(sed -n 's:.*<ReceiptHandle>\(.*\)</ReceiptHandle>.*:\1:p' <<<"$r")
        echo "-- $q: $(sed 's/&#34;/"/g; s/&quot;/"/g; s/&lt;/</g; s/&gt;/>/g; s/&amp;/\&/g' <<<"$body")"
        curl -fsS --data-urlencode "ReceiptHandle=$receipt" -d "Action=DeleteMessage&QueueUrl=http://127.0.0.1:$SQS_PORT/100010001000/$q" "http://127.0.0.1:$SQS_PORT/" >/dev/null
        n=$((n + 1))
      done
    done
    [ "$n" -ge 4 ] && break
    sleep 0.2
  done
  [ "$n" -ge 4 ] || { echo "only $n of 4 messages arrived" >&2; exit 1; }
  ;;
sns)
  say "messages the SNS FIFO topics delivered to their FIFO queue subscriptions (group = aggregate id, deduplication id = message id): 4 expected, none from the rolled-back order"
  python3 - "$SNS_PORT" <<'PY'
import json, sys, time, urllib.request
port = sys.argv[1]
def sqs(op, body):
    req = urllib.request.Request("http://127.0.0.1:%s/" % port, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS." + op})
    return json.loads(urllib.request.urlopen(req).read() or b"{}")
n = 0
for _ in range(100):
    for t in ("ORDER", "PAYMENT"):
        q = "http://sqs.us-east-1.localhost:%s/000000000000/outbox-demo-%s-q.fifo" % (port, t)
        while True:
            msgs = sqs("ReceiveMessage", {"QueueUrl": q, "MaxNumberOfMessages": 10, "AttributeNames": ["All"],
                                          "MessageAttributeNames": ["All"]}).get("Messages", [])
            if not msgs:
                break
            for m in msgs:
                a = m.get("Attributes", {})
                print("-- outbox-demo-%s.fifo: group=%s dedup=%s %s" % (t, a.get("MessageGroupId"), a.get("MessageDeduplicationId"), m["Body"]))
                sqs("DeleteMessage", {"QueueUrl": q, "ReceiptHandle": m["ReceiptHandle"]})
                n += 1
    if n >= 4:
        break
    time.sleep(0.2)
if n < 4:
    sys.exit("only %d of 4 messages arrived" % n)
PY
  ;;
http)
  say "webhooks the receiver accepted (signature verified, webhook-id = message id): 4 expected, none from the rolled-back order"
  for _ in $(seq 1 100); do
    [ "$(wc -l <"$work/received.jsonl" 2>/dev/null || echo 0)" -ge 4 ] && break
    sleep 0.2
  done
  python3 - "$work/received.jsonl" <<'PY'
import base64, json, sys
n = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    n += 1
    print("POST %s  webhook-id=%s  signature_ok=%s" % (r["path"], r["headers"].get("webhook-id"), r["signature_ok"]))
    print("  " + base64.b64decode(r.get("body", "")).decode())
    if not r["signature_ok"]:
        sys.exit("a request's signature did not verify")
if n < 4:
    sys.exit("only %d of 4 webhooks arrived" % n)
PY
  ;;
esac
sleep 0.5

say "metrics"
curl -fsS "http://$HTTP_ADDR/metrics" | grep -E '^outbox_cdc_(source_events|source_skipped|records_delivered|checkpoint_saves)' || true

say "stopping outbox-cdc with SIGTERM (drain, checkpoint, exit 0)"
kill -TERM "$cdc"
rc=0; wait "$cdc" || rc=$?
echo "outbox-cdc exit status: $rc; checkpoint: $(head -c 300 "$work/outbox-cdc.checkpoint" | tr '\n' ' ')"
[ "$rc" -eq 0 ]
case "$SINK:${DEMO_KEEP:-}" in
*:1) : ;;
nats:*) "$BIN"/consume -nats "$NATS_URL" -stream "$stream" -n 0 -timeout 1s -delete >/dev/null ;;
redis:*) for k in $(redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" --raw KEYS "$prefix*"); do redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" DEL "$k" >/dev/null; done ;;
rabbitmq:*) : ;; # the consumer's exchange went with its queue
esac
echo
echo "demo finished (sink: $SINK); files in $work"
