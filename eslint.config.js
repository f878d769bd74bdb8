import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const PUBLIC_ENTRY = [
  { group: ['@genfill/*/src/*', '@genfill/*/src'], message: 'import a package through its public entry (@genfill/<pkg>)' },
  { group: ['**/packages/*/src/**', '../../*/src/**'], message: 'import another package through @genfill/<pkg>' },
];

const LAYERS = [
  {
    files: ['packages/*/src/**'],
    forbid: ['@genfill/switch'],
    message: 'only apps import @genfill/switch: a package that needs the switch takes it injected (see ProjectorExtension)',
  },
  {
    files: ['packages/projector/src/**'],
    forbid: ['@genfill/switch', '@genfill/reconcile'],
    message: 'the live writer (projector) depends on neither the switch nor the verifier (reconcile)',
  },
  {
    files: ['packages/reconcile/src/**'],
    forbid: ['@genfill/switch', '@genfill/planner'],
    message: 'the reconciler proves a build with its own queries: it imports neither the planner nor the switch',
  },
];

export default tseslint.config(
  { ignores: ['**/node_modules/**', 'reports/**', '.turbo/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      // User-facing output goes through the CLI's Io; everything else logs with pino.
      'no-console': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-non-null-assertion': 'off',
      'no-restricted-imports': ['error', { patterns: PUBLIC_ENTRY }],
    },
  },
  // The layering docs/design.md draws, enforced: only apps compose the switch with the services it
  // runs in; the live writer never depends on its verifier; the reconciler never on the planner.
  ...LAYERS.map(({ files, forbid, message }) => ({
    files,
    rules: { 'no-restricted-imports': ['error', { patterns: [...PUBLIC_ENTRY, { group: forbid, message }] }] },
  })),
  {
    files: ['**/test/**', 'bench/**', 'test/**'],
    // Tests edit release files as loose objects on purpose (to write invalid ones).
    rules: { 'no-console': 'off', 'no-restricted-imports': 'off', '@typescript-eslint/no-explicit-any': 'off' },
  },
);
