// Jest extends create-plugin's managed config (.config/jest.config.js).
// force timezone to UTC to allow tests to work regardless of local timezone
process.env.TZ = 'UTC';

const { grafanaESModules, nodeModulesToTransform } = require('./.config/jest/utils');

// ES-module-only packages that @grafana/ui and @grafana/data pull in beyond
// the managed list.
const esmOnly = ['d3-[^/]+', 'internmap', '@grafana/flamegraph', '@react-hookz/web', '@ver0/[^/]+'];

const base = require('./.config/jest.config');

module.exports = {
  // Jest configuration provided by Grafana scaffolding
  ...base,
  // Some of those ship only .mjs files, which the managed transform (for
  // .js/.ts files) skips: swc compiles them the same way.
  transform: { ...base.transform, '^.+\\.mjs$': base.transform['^.+\\.(t|j)sx?$'] },
  // A generous per-test limit: a limit, not an assertion. Typing into
  // @grafana/ui forms under jsdom is slow on a loaded 2-core CI box.
  testTimeout: 60_000,
  transformIgnorePatterns: [nodeModulesToTransform([...grafanaESModules, ...esmOnly])],
};
