-- 0031_dependencies: the snapshot a dependency's content hash was pinned in (issue 29).
-- Add-only: never edit this file once landed; add the next number instead.
--
-- A cutover checks inside its freeze only the captured events of each declared dependency in
-- (pin, S_cut] — not the dependency's whole content, so the freeze does not grow with its size
-- (packages/switch/src/dependencies.ts). The pin's snapshot is taken by `plan` before it hashes
-- the dependency, so every change the hash does not hold lies after it. A pin made before this
-- migration has none: the check falls back to the release floor, which the plan's snapshot
-- contains (a change between the two refuses too, as the projector's flag already did).
ALTER TABLE genfill.dependency_pins ADD COLUMN pinned_snapshot pg_snapshot;
COMMENT ON COLUMN genfill.dependency_pins.pinned_snapshot IS
  'The plan''s snapshot, taken before the content hash: the cutover checks the dependency''s captured events after it.';
