-- 0022_current_receipts: the receipts no repair has superseded, as one named relation. A repair
-- writes a receipt that supersedes the current one (receipts.supersedes); earlier receipts stay
-- as history. "The current receipt" was the same anti-join written out in every query that
-- needed it; it is this view now. PostgreSQL flattens the view into the query that reads it, so
-- the plan is the anti-join the written-out query had.
-- Add-only: never edit this file once landed; add 0023_… instead.

CREATE VIEW genfill.current_receipts AS
SELECT r.*
  FROM genfill.receipts r
 WHERE NOT EXISTS (SELECT 1 FROM genfill.receipts s WHERE s.supersedes = r.id);

COMMENT ON VIEW genfill.current_receipts IS
  'Receipts not superseded by a repair: per partition of a release, the receipt that describes its rows now.';

-- Read by whoever reads genfill.receipts.
ALTER VIEW genfill.current_receipts OWNER TO genfill_owner;
GRANT SELECT ON genfill.current_receipts TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
