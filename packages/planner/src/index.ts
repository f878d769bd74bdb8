export { adoptDataset } from './adopt.ts';
export { type Actor, cancelRelease, setOperatorPause } from './control.ts';
export { planAndDispatch, type PlanDispatchResult, startBuilding } from './dispatch.ts';
export { planRelease, type PlanResult } from './plan.ts';
export {
  formatDuration,
  progressLine,
  ProgressMeter,
  type ProgressSample,
  type Rates,
  releaseProgress,
} from './progress.ts';
export { type PlannerWiredHandlers, plannerRequestHandlers, type RoundResult, runPlannerService, stopOnSignals } from './service.ts';
export { submitRelease, validateRelease } from './submit.ts';
export { DISPATCH_WINDOW, enqueueUnfinished, topUpWindow } from './enqueue.ts';
