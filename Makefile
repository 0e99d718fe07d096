# outbox-cdc: the two commands a fresh machine needs are `make demo` and `make test`.
GO       ?= go
BIN      ?= bin
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)

.PHONY: build services demo examples test test-short vet fmt bench clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/outbox-cdc ./cmd/outbox-cdc
	$(GO) build -o $(BIN)/kfake-broker ./test/cmd/kfake-broker
	$(GO) build -o $(BIN)/consume ./test/cmd/consume

# The example service and consumers (examples/): bin/orders-service, bin/consume-<client>.
EXAMPLES := orders-service consume-sarama consume-franz consume-amqp consume-nats consume-redis
examples:
	for e in $(EXAMPLES); do $(GO) build -o $(BIN)/$$e ./examples/$$e || exit 1; done

# Make the local MariaDB and PostgreSQL CDC-ready (idempotent; needs root).
services:
	./scripts/prepare-services.sh

# End to end: local MariaDB -> outbox-cdc -> broker -> consumer. It needs
# the MariaDB binlog on (prepare-services.sh demo turns it on, restarting
# MariaDB only if it is off), no TLS.
# SINK=kafka (a local Kafka-protocol broker) | rabbitmq | nats | redis | sqs (goaws) | sns (fauxqs) |
# http (webhooks to a Python receiver started by the demo);
# the DEMO_* variables of scripts/demo.sh override names and addresses.
SINK ?= kafka
demo: build
	./scripts/prepare-services.sh demo
	SINK=$(SINK) ./scripts/demo.sh

# Both ends of the pattern with the kit: the order service writes orders and
# outbox rows, outbox-cdc (killed with SIGKILL midway) delivers them, and a
# consumer applies each event exactly once. One target per client:
# example-sarama, example-franz (Kafka), example-amqp (RabbitMQ),
# example-nats, example-redis; MODE=dedupe | redis | machine.
MODE ?= dedupe
example-%: build examples services
	CLIENT=$* MODE=$(MODE) ./scripts/example.sh

# Every test, against the real local services and an in-process Kafka-protocol broker. The end-to-end
# package alone runs 15+ minutes on 2 cores (fault tests wait out real timeouts), hence the limit.
test: services
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 40m ./...

test-short:
	$(GO) test -race -count=1 -short ./...

# Benchmarks against the local databases and a broker process (bench/README.md):
# 30-40 minutes per database at the defaults (the time of each scenario is in
# bench/README.md); writes bench/RESULTS.md, bench/*.svg and bench/results.json.
# BENCH_FLAGS="-rows 100000 -dbs mysql -scenarios drain" for a quick run,
# "-bigtx" adds the 1,000,000-row transaction (~1 GB per database),
# "-baseline old.json" a before/after table.
BENCH_FLAGS ?=
bench: build services
	$(GO) run ./bench $(BENCH_FLAGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN)
