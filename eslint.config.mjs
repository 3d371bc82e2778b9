import { defineConfig } from 'eslint/config';
import baseConfig from './.config/eslint.config.mjs';

export default defineConfig([
  {
    ignores: ['**/node_modules/', '**/dist/', 'e2e/out/', '.config/', '**/.eslintcache'],
  },
  ...baseConfig,
]);
