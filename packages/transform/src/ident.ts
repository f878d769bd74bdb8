// Quoting for names genfill puts into SQL text. Values always travel as parameters; names
// cannot, so every name is quoted (never trusted to be a plain identifier).
import { InvalidInputError } from '@genfill/contracts';

export function quoteIdent(name: string): string {
  if (name.length === 0) throw new InvalidInputError('an SQL identifier must not be empty');
  if (name.includes('\0')) throw new InvalidInputError(`SQL identifier ${JSON.stringify(name)} contains a NUL byte`);
  return `"${name.replace(/"/g, '""')}"`;
}

/**
 * `public.orders` → `"public"."orders"`. Splits on every dot, so a name whose parts contain
 * dots cannot be written this way; release names are validated as plain schema.name.
 */
export function quoteQualified(name: string): string {
  const parts = name.split('.');
  if (parts.some((p) => p.length === 0)) {
    throw new InvalidInputError(`${JSON.stringify(name)} is not a valid qualified name: it has an empty part`);
  }
  return parts.map(quoteIdent).join('.');
}
