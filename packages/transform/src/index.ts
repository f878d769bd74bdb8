// Public API of @genfill/transform: the checks `release validate` runs on a transform, the
// admission every service runs again before each use of stored transform text, the wrapper
// that binds a partition's rows to the CTE `source`, and the one way to send person-supplied
// SQL (the extended protocol).
export { ADMISSION_TTL_MS, admitOnConnection, type AdmittedTransform, admitTransform, forgetAdmissions, loadAdmittedTransform, type TransformContext } from './admit.ts';
export { type ProbeOptions, type ProbeResult, probeTransform } from './probe.ts';
export { deniedBuiltin } from './rules.ts';
export { checkTransformStatic } from './static.ts';
export { queryUserSql } from './user-sql.ts';
export { stripTrailingSemicolons, wrapTransform } from './wrap.ts';
