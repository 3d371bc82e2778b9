// Jest for the front end, as create-plugin sets it up: swc transforms
// TypeScript and JSX, jsdom stands in for the browser.
const esmOnly = ['d3', 'd3-[^/]+', 'internmap', 'ol', 'marked', 'uuid', '@grafana/flamegraph', '@react-hookz/web', '@ver0/[^/]+', 'react-calendar', 'get-user-locale', 'memoize', 'mimic-function', '@wojtekmaj/date-utils'];

module.exports = {
  testEnvironment: 'jsdom',
  // A generous per-test limit: a limit, not an assertion. Typing into
  // @grafana/ui forms under jsdom is slow on a loaded 2-core CI box.
  testTimeout: 60_000,
  roots: ['<rootDir>/grafana-plugin/src'],
  testMatch: ['**/*.test.ts', '**/*.test.tsx'],
  setupFilesAfterEnv: ['<rootDir>/.config/jest-setup.ts'],
  transform: {
    '^.+\\.(t|j)sx?$|^.+\\.m?js$': [
      '@swc/jest',
      { jsc: { parser: { syntax: 'typescript', tsx: true }, transform: { react: { runtime: 'automatic' } } } },
    ],
  },
  // Grafana's packages ship CommonJS builds, but some of their dependencies
  // are ES modules only; those are transformed too.
  transformIgnorePatterns: [`node_modules/(?!(${esmOnly.join('|')})/)`],
  moduleNameMapper: { '\\.(css|scss|sass)$': '<rootDir>/.config/jest-style-stub.js' },
};
