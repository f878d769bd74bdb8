export { buildPartition } from './build.ts';
export { buildStatement } from './statement.ts';
export { claimPartition, failPartition } from './claim.ts';
export { partitionsFromFindings, repairRelease, repairRequest } from './repair.ts';
export { startWorkerService } from './service.ts';
