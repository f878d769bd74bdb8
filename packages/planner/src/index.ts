export { adoptDataset } from './adopt.ts';
export { type Actor, cancelRelease, setOperatorPause } from './control.ts';
export { planAndDispatch, type PlanDispatchResult, startBuilding } from './dispatch.ts';
export { planRelease, type PlanResult } from './plan.ts';
export { type PlannerWiredHandlers, type RoundResult, runPlannerService } from './service.ts';
export { submitRelease, validateRelease } from './submit.ts';
export { enqueueUnfinished, topUpWindow } from './enqueue.ts';
