export { approveRelease, type ApproveResult } from './approve.ts';
export { describeFinding } from './findings.ts';
export { reconcile, type ReconcileResult } from './reconcile.ts';
export { startReconcilerService } from './service.ts';
