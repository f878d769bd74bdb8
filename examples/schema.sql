-- The example dataset the release above refers to (the demo seeds it with rows).
CREATE TABLE IF NOT EXISTS public.orders (
  order_id     bigint PRIMARY KEY,
  customer_id  bigint NOT NULL,
  region       text NOT NULL,
  created_at   timestamptz NOT NULL,
  amount_cents bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS orders_created_at_idx ON public.orders (created_at);
CREATE TABLE IF NOT EXISTS public.tax_rates (
  region text PRIMARY KEY,
  rate   numeric(6, 4) NOT NULL
);
CREATE TABLE IF NOT EXISTS public.orders_enriched (
  order_id     bigint PRIMARY KEY,
  created_at   timestamptz NOT NULL,
  region       text NOT NULL,
  amount_cents bigint NOT NULL,
  tax_cents    bigint NOT NULL
);
