import { describe, expect, it } from 'vitest';
import {
  CasConflictError,
  ERROR_CLASSES,
  exitCodeOf,
  fromStoredError,
  GenerationGoneError,
  GenfillError,
  IngressBusyError,
  InvalidInputError,
  NotFoundError,
  RefusedError,
  RequestFailedError,
  StaleLeaseError,
  SwitchRefusedError,
  toStoredError,
  UnknownDatasetError,
} from '../src/index.ts';

/** Through the requests table and back: JSON, as jsonb keeps it. */
const acrossProcesses = (err: unknown, request = '7') => fromStoredError(JSON.parse(JSON.stringify(toStoredError(err))), request);

describe('an error that crosses a process keeps its class, code and fields', () => {
  const samples: GenfillError[] = [
    new NotFoundError('release nope@1 does not exist'),
    new InvalidInputError([{ path: 'args.waitMs', message: 'too big' }]),
    new UnknownDatasetError('orders'),
    new CasConflictError('r@1', 'BUILT', null, 'RECONCILED'),
    new IngressBusyError('orders', 9, 2, 10, 5),
    new GenerationGoneError('orders', 'g1', 'RETIRED', 'g1 was retired'),
    new StaleLeaseError('r@1', 'p1', 3),
    new SwitchRefusedError('cutover', 'manifest', 'cutover refused: precondition manifest: …'),
  ];

  it.each(samples.map((e) => [e.name, e] as const))('%s comes back as itself: class, message, exit code, fields', (_name, err) => {
    const back = acrossProcesses(err);
    expect(back).toBeInstanceOf(err.constructor);
    expect(back).toBeInstanceOf(GenfillError);
    expect(back).toBeInstanceOf(Error);
    expect(back.name).toBe(err.name);
    expect(back.message).toBe(err.message);
    expect(exitCodeOf(back)).toBe(exitCodeOf(err));
    expect(back.retryable).toBe(err.retryable);
    const { ...fields } = err as unknown as Record<string, unknown>;
    expect(back).toMatchObject(fields);
    expect(back).toMatchObject({ request: '7' });
  });

  it('knows every class of contracts by its own name', () => {
    for (const [name, cls] of Object.entries(ERROR_CLASSES)) expect(cls.name).toBe(name);
  });

  it('keeps the SQLSTATE of the server error behind it', () => {
    const cause = Object.assign(new Error('release x does not exist'), { code: 'GFN01', severity: 'ERROR' });
    expect(toStoredError(new NotFoundError(cause.message, { cause }))).toMatchObject({ name: 'NotFoundError', code: 'GFN01', exitCode: 3 });
  });

  it('rebuilds a class this process does not know as its nearest known ancestor, named as raised', () => {
    class LeaseLost extends RefusedError {}
    const back = acrossProcesses(new LeaseLost('the lease of cutover #3 was taken over'));
    expect(back).toBeInstanceOf(RefusedError);
    expect(back).toMatchObject({ name: 'LeaseLost', exitCode: 3, message: 'the lease of cutover #3 was taken over' });
  });

  it('falls back to a generic error of the stored exit code, and reads rows stored before errors kept their class', () => {
    const plain = acrossProcesses(Object.assign(new Error('could not serialize access'), { code: '40001', severity: 'ERROR' }));
    expect(plain).toBeInstanceOf(RequestFailedError);
    expect(plain).toMatchObject({ exitCode: 1, request: '7', message: 'could not serialize access' });
    const old = fromStoredError({ name: 'InvalidInputError', message: 'x: bad', exitCode: 2, problems: [{ path: 'x', message: 'bad' }] }, '8');
    expect(old).toBeInstanceOf(InvalidInputError);
    expect((old as InvalidInputError).problems).toEqual([{ path: 'x', message: 'bad' }]);
    const gone = fromStoredError({ name: 'SomethingRemoved', message: 'refused', exitCode: 3 }, '9');
    expect(gone).toBeInstanceOf(RequestFailedError);
    expect(gone).toMatchObject({ exitCode: 3, errorName: 'SomethingRemoved' });
  });

  it('never lets a stored field replace the prototype', () => {
    const hostile = JSON.parse('{"name":"RefusedError","lineage":[],"message":"m","exitCode":3,"code":null,"retryable":false,"fields":{"__proto__":{"exitCode":0},"x":1}}');
    const back = fromStoredError(hostile, '1');
    expect(back).toBeInstanceOf(RefusedError);
    expect(back).toMatchObject({ exitCode: 3, x: 1 });
  });
});
