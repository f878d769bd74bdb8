-- The fixed tax: the rate of the order's region, rounded half away from zero per order.
-- Row-local: one output row per source row, reading only the pinned public.tax_rates.
SELECT s.order_id,
       s.created_at,
       s.region,
       s.amount_cents,
       round(s.amount_cents * coalesce(t.rate, 0))::bigint AS tax_cents
  FROM source AS s
  LEFT JOIN public.tax_rates AS t ON t.region = s.region
