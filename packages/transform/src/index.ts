// Public API of @genfill/transform: the checks `release validate` runs on a transform, and
// the wrapper that binds a partition's rows to the CTE `source`.
export { checkTransformStatic, parseSingleSelect, TRANSFORM_PATH } from './static.ts';
export type { StaticCheckResult } from './static.ts';
export { probeTransform } from './probe.ts';
export type { OutputColumn, ProbeOptions, ProbeResult } from './probe.ts';
export { wrapTransform, stripTrailingSemicolons } from './wrap.ts';
