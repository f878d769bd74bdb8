export { type Cursor, encodeCursor } from './cursor.ts';
export { DIFF_SAMPLE, type DiffResult, type DiffSampleEntry, diffRelease, parseSample } from './diff.ts';
export {
  newHolder,
  openPinnedRead,
  parseLimit,
  type PinOptions,
  PinnedRead,
  READ_LIMITS,
  type ReadPage,
  readPage,
  type ReadRequest,
} from './pinned.ts';
export type { Row } from './sql.ts';
