-- 0033_latest_in_s: "latest" means latest visible in S over the whole log (issue 29, finding 1).
-- Add-only: never edit this file once landed; add a later one instead.
--
-- A capped projector batch stores a prefix frontier S' = (xmin, X, xip(S) below X): it counts a
-- transaction below X as seen even when it committed after one at or above X. When the one
-- below X deleted a key the one above inserted (its xid is older, its event newer), S' sees the
-- delete and not the insert; a candidate whose catch-up frontier is S' (a carry chunk's
-- watermark) then took the insert as the key's latest event in (S', S] and resurrected the key.
-- Every apply now stages, for each key with an event in (F, S], the key's latest event visible
-- in S over the whole log (packages/projector/src/statement.ts; the tail check likewise). An
-- event superseding the window's event of a key has a larger event id (for one key, event ids
-- follow commit order: 0009's sequence, the row lock), so it is found among the events with an
-- event id at least the window's smallest: this index reads them per txid partition. A bigint
-- index grows at its right edge (one page split per page of events, no jsonb comparison);
-- 0012's dropped key index was the expensive kind.
CREATE INDEX change_log_table_event_idx ON genfill.change_log (source_table, event_id);

-- Issue 29, finding 6: a catch-up round is recorded in genfill.catchup_rounds only when it
-- consumed events or ran to the barrier; the projector service ran an empty round every poll
-- for every built candidate (~166,000 rows a day per release). The last round, recorded or
-- not, is kept here for `status` ({id|null, to, toBarrier, events, upserted, tombstones,
-- noops, root, recorded, at}); genfill_service's table-level UPDATE covers the column.
ALTER TABLE genfill.catchup_frontiers ADD COLUMN last_round jsonb;
