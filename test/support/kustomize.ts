// The part of kustomize that deploy/ uses, so the tests can build the base and the overlays on
// a machine without kubectl: resources (files and directories), components, namespace, images,
// configMapGenerator (behavior merge), secretGenerator (without a name hash), and patches
// (strategic merge, including `$patch: delete`). Anything else in a kustomization is an error
// here — extend this file along with deploy/. test/deploy.test.ts compares its output with
// `kubectl kustomize` wherever kubectl is installed.
import { readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseAllDocuments } from 'yaml';

export type Obj = Record<string, any>;

const CLUSTER_SCOPED = new Set(['Namespace', 'ClusterRole', 'ClusterRoleBinding', 'CustomResourceDefinition', 'PriorityClass', 'StorageClass']);
const KNOWN = new Set(['apiVersion', 'kind', 'resources', 'components', 'namespace', 'images', 'configMapGenerator', 'secretGenerator', 'patches']);

/** Every YAML document of a file, as plain objects (comments and empty documents dropped). */
export function readDocuments(file: string): Obj[] {
  return parseAllDocuments(readFileSync(file, 'utf8'))
    .map((d) => {
      if (d.errors.length > 0) throw new Error(`${file}: ${d.errors[0]!.message}`);
      return d.toJS() as Obj | null;
    })
    .filter((d): d is Obj => d !== null);
}

function kustomization(dir: string): Obj {
  const k = readDocuments(join(dir, 'kustomization.yaml'))[0]!;
  for (const key of Object.keys(k)) if (!KNOWN.has(key)) throw new Error(`${dir}/kustomization.yaml: "${key}" is not in the kustomize subset of test/support/kustomize.ts`);
  return k;
}

const same = (a: Obj, b: Obj) => a.kind === b.kind && a.metadata?.name === b.metadata?.name;

function mergePatch(target: any, patch: any): any {
  if (Array.isArray(target) && Array.isArray(patch) && patch.every((p) => p && typeof p === 'object' && 'name' in p)) {
    // Strategic merge of lists of named items (containers, ports, env): by name.
    const out = target.map((t) => ({ ...t }));
    for (const p of patch) {
      const i = out.findIndex((t) => t?.name === p.name);
      if (i >= 0) out[i] = mergePatch(out[i], p);
      else out.push(p);
    }
    return out;
  }
  if (target && patch && typeof target === 'object' && typeof patch === 'object' && !Array.isArray(target) && !Array.isArray(patch)) {
    const out: Obj = { ...target };
    for (const [k, v] of Object.entries(patch)) out[k] = v === null ? undefined : k in out ? mergePatch(out[k], v) : v;
    for (const k of Object.keys(out)) if (out[k] === undefined) delete out[k];
    return out;
  }
  return patch;
}

function applyPatches(dir: string, k: Obj, objects: Obj[]): Obj[] {
  let out = objects;
  for (const p of k.patches ?? []) {
    const docs = p.path ? readDocuments(resolve(dir, p.path)) : parseAllDocuments(String(p.patch)).map((d) => d.toJS() as Obj);
    for (const patch of docs) {
      const hit = out.filter((o) => same(o, patch));
      if (hit.length !== 1) throw new Error(`${dir}: patch for ${patch.kind}/${patch.metadata?.name} matches ${hit.length} objects`);
      if (patch.$patch === 'delete') out = out.filter((o) => !same(o, patch));
      else out = out.map((o) => (same(o, patch) ? mergePatch(o, patch) : o));
    }
  }
  return out;
}

function literals(list: string[] = []): Record<string, string> {
  return Object.fromEntries(list.map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
}

function generate(dir: string, k: Obj, objects: Obj[]): Obj[] {
  let out = objects;
  for (const g of k.configMapGenerator ?? []) {
    if (g.behavior !== 'merge') throw new Error(`${dir}: only configMapGenerator behavior merge is in the test subset`);
    const hit = out.find((o) => o.kind === 'ConfigMap' && o.metadata.name === g.name);
    if (!hit) throw new Error(`${dir}: configMapGenerator merges into ConfigMap ${g.name}, which is not there`);
    out = out.map((o) => (o === hit ? { ...o, data: { ...o.data, ...literals(g.literals) } } : o));
  }
  for (const g of k.secretGenerator ?? []) {
    if (g.options?.disableNameSuffixHash !== true) throw new Error(`${dir}: secretGenerator needs options.disableNameSuffixHash in the test subset`);
    const data = Object.fromEntries(Object.entries(literals(g.literals)).map(([key, v]) => [key, Buffer.from(v).toString('base64')]));
    out = [...out, { apiVersion: 'v1', kind: 'Secret', metadata: { name: g.name }, type: 'Opaque', data }];
  }
  return out;
}

function podSpecs(o: Obj): Obj[] {
  const spec = o.spec?.template?.spec;
  return spec ? [spec] : [];
}

function transform(k: Obj, objects: Obj[]): Obj[] {
  return objects.map((o) => {
    let x: Obj = structuredClone(o);
    if (k.namespace && !CLUSTER_SCOPED.has(x.kind)) x = { ...x, metadata: { ...x.metadata, namespace: k.namespace } };
    for (const img of k.images ?? []) {
      for (const spec of podSpecs(x)) {
        for (const c of [...(spec.containers ?? []), ...(spec.initContainers ?? [])]) {
          const name = String(c.image).split(/[:@]/)[0];
          if (name === img.name) c.image = `${img.newName ?? img.name}${img.newTag ? `:${img.newTag}` : ''}`;
        }
      }
    }
    return x;
  });
}

function load(dir: string, entry: string): Obj[] {
  const path = resolve(dir, entry);
  return statSync(path).isDirectory() ? build(path) : readDocuments(path);
}

/** `kustomize build <dir>` for the subset above. */
export function build(dir: string): Obj[] {
  const k = kustomization(dir);
  let objects: Obj[] = (k.resources ?? []).flatMap((r: string) => load(dir, r));
  for (const c of k.components ?? []) {
    const cdir = resolve(dir, c);
    const ck = kustomization(cdir);
    if (ck.kind !== 'Component') throw new Error(`${cdir} is not a kustomize Component`);
    objects = [...objects, ...(ck.resources ?? []).flatMap((r: string) => load(cdir, r))];
    objects = applyPatches(cdir, ck, generate(cdir, ck, objects));
  }
  objects = applyPatches(dir, k, generate(dir, k, objects));
  return transform(k, objects);
}
