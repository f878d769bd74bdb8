import { describe, expect, it } from 'vitest';
import { quoteIdent, quoteQualified } from '../src/index.ts';

describe('quoteIdent and quoteQualified', () => {
  it('quote each part and double embedded quotes', () => {
    expect(quoteIdent('orders')).toBe('"orders"');
    expect(quoteIdent('we"ird')).toBe('"we""ird"');
    expect(quoteQualified('public.orders')).toBe('"public"."orders"');
  });

  it('refuse empty names, NUL bytes and names that are not schema.name', () => {
    expect(() => quoteIdent('')).toThrow(/must not be empty/);
    expect(() => quoteIdent('a\0b')).toThrow(/NUL byte/);
    expect(() => quoteQualified('public.')).toThrow(/schema-qualified/);
    expect(() => quoteQualified('orders')).toThrow(/schema-qualified/);
    expect(() => quoteQualified('a.b.c')).toThrow(/schema-qualified/);
  });
});
