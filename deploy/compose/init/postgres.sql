-- Runs once when the postgres volume is created (docker-entrypoint-initdb.d)
-- in the database "shop" (POSTGRES_DB).
CREATE TABLE public.outbox_message (
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

CREATE TABLE public.orders (
  id BIGSERIAL PRIMARY KEY,
  order_no VARCHAR(32) NOT NULL
);

-- The connector's role: logical replication plus read access. The
-- publication is created here because creating one needs table ownership;
-- outbox-cdc creates the slot itself on its first start.
CREATE ROLE cdc WITH LOGIN REPLICATION PASSWORD 'cdc-quickstart';
GRANT SELECT ON public.outbox_message TO cdc;
CREATE PUBLICATION outbox_cdc_orders_outbox_postgres FOR TABLE public.outbox_message WITH (publish = 'insert');
