import { stringify } from 'yaml';

/** Objects as one multi-document YAML stream, ready for `kubectl apply -f -`. */
export function toYamlDocuments(objects: unknown[]): string {
  return objects.map((o) => stringify(o, { lineWidth: 0 })).join('---\n');
}
