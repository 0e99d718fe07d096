-- The outbox table for PostgreSQL (JSONB payload): the one definition that
-- the test suite (testenv), the benchmarks and the Docker Compose
-- quickstart (deploy/docker-compose.yaml) all create.
CREATE TABLE outbox_message (
  id BIGSERIAL PRIMARY KEY,
  message_id VARCHAR(64) NOT NULL UNIQUE,
  aggregate_type VARCHAR(64) NOT NULL,
  aggregate_id VARCHAR(64) NOT NULL,
  event_type VARCHAR(64) NOT NULL,
  payload JSONB NOT NULL,
  status SMALLINT NOT NULL DEFAULT 0,
  retry_count INT NOT NULL DEFAULT 0,
  next_retry_at TIMESTAMPTZ,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX ON outbox_message (status, next_retry_at);
CREATE INDEX ON outbox_message (aggregate_type, aggregate_id);
