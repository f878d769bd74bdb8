import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['packages/*/test/**/*.test.ts', 'apps/*/test/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Test files run in parallel processes; each has its own database and queue prefix.
    pool: 'forks',
    // after-hooks in reverse order of registration, one at a time: a file's own pools end
    // before test/support/db.ts drops its database.
    sequence: { hooks: 'stack' },
  },
});
