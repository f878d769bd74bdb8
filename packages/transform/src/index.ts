// Public API of @genfill/transform: the checks `release validate` runs on a transform, and
// the wrapper that binds a partition's rows to the CTE `source`.
export { type ProbeOptions, type ProbeResult, probeTransform } from './probe.ts';
export { checkTransformStatic } from './static.ts';
export { wrapTransform } from './wrap.ts';
