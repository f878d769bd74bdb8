// Units (partition.batchRows): the grouping every dispatcher derives the same way, and the job
// ids it gives — the window's presence check and the stuck-job detection both rest on them.
import { describe, expect, it } from 'vitest';
import { groupUnits } from '../src/enqueue.ts';

type P = Parameters<typeof groupUnits>[0][number];
const part = (i: number, est: number | null, over: Partial<P> = {}): P => ({ id: `p${String(i).padStart(3, '0')}`, status: 'PENDING', epoch: 0, kind: 'build', est, ...over });

describe('groupUnits', () => {
  it('is one job per partition, with the partition’s own job id, when batchRows is 0', () => {
    const units = groupUnits([part(1, 10), part(2, 10, { epoch: 3 })], 0);
    expect(units.map((u) => u.jobId)).toEqual(['p001.e0', 'p002.e3']);
  });

  it('groups consecutive partitions up to batchRows estimated rows; a partition over it stands alone', () => {
    const units = groupUnits([part(1, 40), part(2, 40), part(3, 30), part(4, 500), part(5, 10), part(6, 10)], 100);
    expect(units.map((u) => u.members.map((m) => m.id))).toEqual([['p001', 'p002'], ['p003'], ['p004'], ['p005', 'p006']]);
    expect(units.map((u) => u.jobId)).toEqual(['p001+1.e0', 'p003.e0', 'p004.e0', 'p005+1.e0']);
  });

  it('keeps a partition without an estimate alone, and never mixes build and carry partitions', () => {
    const units = groupUnits([part(1, 1), part(2, null), part(3, 1), part(4, 1, { kind: 'carry' }), part(5, 1, { kind: 'carry' })], 100);
    expect(units.map((u) => u.members.map((m) => m.id))).toEqual([['p001'], ['p002'], ['p003'], ['p004', 'p005']]);
  });

  it('groups built partitions too, so a unit keeps its members and its id as partitions finish', () => {
    const all = [part(1, 10), part(2, 10), part(3, 10)];
    const later = all.map((p, i) => (i === 0 ? { ...p, status: 'BUILT' as const } : p));
    expect(groupUnits(later, 100)).toEqual(groupUnits(all, 100).map((u) => ({ ...u, members: later })));
  });

  it('gives the unit a new job id when any member is requeued under a new epoch', () => {
    const before = groupUnits([part(1, 10), part(2, 10)], 100)[0]!.jobId;
    const after = groupUnits([part(1, 10), part(2, 10, { epoch: 1 })], 100)[0]!.jobId;
    expect([before, after]).toEqual(['p001+1.e0', 'p001+1.e1']);
  });

  it('caps a unit at 1000 partitions whatever their size', () => {
    const units = groupUnits(Array.from({ length: 2500 }, (_, i) => part(i, 0)), 1_000_000);
    expect(units.map((u) => u.members.length)).toEqual([1000, 1000, 500]);
  });
});
