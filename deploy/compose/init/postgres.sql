-- Runs once when the postgres volume is created (docker-entrypoint-initdb.d)
-- in the database "shop" (POSTGRES_DB), after 10-outbox.sql, which is the
-- outbox table's one definition (schema/postgres.sql).
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
