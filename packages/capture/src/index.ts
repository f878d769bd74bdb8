// @genfill/capture: change capture (statement-level triggers into genfill.change_log), the
// ingress mirror and `genfill ingest`, and the consumption primitive the projector and
// catch-up share (SPEC "Capture rules", "Ingress", invariants 5 and 6).
export { ConsumeIsolationError, type ConsumedBatch, type ConsumedEvent, type ConsumeOrder, type ConsumeRange, consumeBatch, consumeStatement, FrontierAheadError, newEventsStatement, newEventsWhere } from './consume.ts';
export { containmentMinimum, contains, formatSnapshot, GENESIS_SNAPSHOT, parseSnapshot, type Snapshot, snapshotContains, visibleIn } from './snapshot.ts';
export { installIngressMirror, type IngressMirror, type IngressMirrorInstall } from './ingress.ts';
export { type IngressEvent, type MirrorShape, type ParsedLine, type RawLine } from './ingress-events.ts';
export { ingest, type IngestOptions, type IngestResult, maxPendingEvents } from './ingress-ingest.ts';
export { type CaptureInstall, type CaptureRemove, installCapture, removeCapture } from './capture.ts';
export { CaptureRefusedError, type ChosenKey, type KeyCandidate } from './capture-checks.ts';
export { type CaptureEvent } from './capture-sql.ts';
export { captureStatus, type CaptureStatus } from './capture-status.ts';
