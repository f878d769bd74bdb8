import js from '@eslint/js';
import tseslint from 'typescript-eslint';

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
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: ['@genfill/*/src/*', '@genfill/*/src'], message: 'import a package through its public entry (@genfill/<pkg>)' },
            { group: ['**/packages/*/src/**', '../../*/src/**'], message: 'import another package through @genfill/<pkg>' },
          ],
        },
      ],
    },
  },
  {
    files: ['**/test/**', 'bench/**', 'test/**'],
    // Tests edit release files as loose objects on purpose (to write invalid ones).
    rules: { 'no-console': 'off', 'no-restricted-imports': 'off', '@typescript-eslint/no-explicit-any': 'off' },
  },
);
