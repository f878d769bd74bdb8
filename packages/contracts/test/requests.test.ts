import { describe, expect, it } from 'vitest';
import { InvalidInputError, parseRequestArgs, requestArgsSchema, REQUEST_KIND_NAMES, REQUEST_KINDS, REQUEST_SERVICES, serviceOf } from '../src/index.ts';

describe('the request kinds, declared once', () => {
  it('gives every kind a service, a description and strict arguments', () => {
    expect(REQUEST_KIND_NAMES.sort()).toEqual(['catchup', 'cutover', 'plan', 'reconcile', 'repair', 'rollback', 'seal', 'unseal']);
    for (const kind of REQUEST_KIND_NAMES) {
      expect(REQUEST_SERVICES).toContain(serviceOf(kind));
      expect(REQUEST_KINDS[kind].description.length).toBeGreaterThan(10);
      expect(() => parseRequestArgs(kind, { ...validArgs(kind), surprise: 1 })).toThrow(InvalidInputError);
    }
  });

  it('gives every kind a JSON Schema of its arguments that genfill.request checks in full: strict, bounded, nothing it skips', () => {
    for (const kind of REQUEST_KIND_NAMES) {
      const schema = requestArgsSchema(kind);
      expect({ kind, type: schema.type, additionalProperties: schema.additionalProperties }).toEqual({ kind, type: 'object', additionalProperties: false });
    }
    expect(requestArgsSchema('seal')).toEqual({
      type: 'object',
      properties: { waitMs: { type: 'integer', exclusiveMinimum: 0, maximum: 1_800_000 } },
      additionalProperties: false,
    });
  });

  it('parses what the CLI and the API send', () => {
    expect(parseRequestArgs('seal', { waitMs: 30_000 })).toEqual({ waitMs: 30_000 });
    expect(parseRequestArgs('cutover', { dryRun: true, maxFreezeMs: 500 })).toEqual({ dryRun: true, maxFreezeMs: 500 });
    expect(parseRequestArgs('repair', { partitions: ['b-20250701T000000Z'] })).toEqual({ partitions: ['b-20250701T000000Z'] });
    expect(parseRequestArgs('unseal', { reason: ' done ' })).toEqual({ reason: 'done' });
  });

  it('refuses unbounded or mistyped arguments as bad input, naming each under where they came from', () => {
    const refused = (kind: Parameters<typeof parseRequestArgs>[0], args: unknown, where?: string) => {
      try {
        parseRequestArgs(kind, args, where);
      } catch (err) {
        expect(err).toBeInstanceOf(InvalidInputError);
        return (err as InvalidInputError).problems.map((p) => p.path);
      }
      throw new Error('accepted');
    };
    expect(refused('seal', { waitMs: 24 * 3600_000 })).toEqual(['args.waitMs']);
    expect(refused('seal', { waitMs: 'soon' })).toEqual(['args.waitMs']);
    expect(refused('cutover', { maxFreezeMs: 3_600_000 }, 'body')).toEqual(['body.maxFreezeMs']);
    expect(refused('unseal', {})).toEqual(['args.reason']);
    expect(refused('repair', { partitions: Array.from({ length: 100_001 }, (_, i) => `p${i}`) })).toEqual(['args.partitions']);
    expect(refused('plan', [])).toEqual(['args']);
    expect(refused('plan', null)).toEqual(['args']);
  });
});

function validArgs(kind: (typeof REQUEST_KIND_NAMES)[number]): Record<string, unknown> {
  return kind === 'unseal' ? { reason: 'r' } : kind === 'repair' ? { partitions: [] } : {};
}
