// Builds the datasource front end into grafana-plugin/dist/module.js, the
// way create-plugin's webpack config does: an AMD module whose React,
// Grafana and rxjs imports are the ones Grafana itself provides at runtime.
import path from 'node:path';
import CopyWebpackPlugin from 'copy-webpack-plugin';
import type { Configuration } from 'webpack';

const root = path.resolve(__dirname, '..');
const src = path.join(root, 'grafana-plugin/src');
const dist = path.join(root, 'grafana-plugin/dist');
// eslint-disable-next-line @typescript-eslint/no-require-imports
const pkg = require(path.join(root, 'package.json'));

// Grafana's SystemJS loader supplies these; bundling a second React or
// @grafana/ui would break hooks and theming.
const externals = [
  'react',
  'react-dom',
  'react/jsx-runtime',
  '@grafana/data',
  '@grafana/ui',
  '@grafana/runtime',
  '@grafana/schema',
  '@emotion/css',
  '@emotion/react',
  'rxjs',
  'rxjs/operators',
  'lodash',
];

export default (env: Record<string, unknown>): Configuration => {
  const production = Boolean(env.production);
  return {
    mode: production ? 'production' : 'development',
    devtool: production ? 'source-map' : 'eval-source-map',
    context: src,
    entry: { module: './module.ts' },
    externals: externals.map((name) => ({ [name]: name })),
    output: {
      path: dist,
      filename: '[name].js',
      library: { type: 'amd' },
      publicPath: `public/plugins/${readPluginID()}/`,
      uniqueName: readPluginID(),
      // The backend executables (mage) live in the same folder.
      clean: false,
    },
    resolve: { extensions: ['.ts', '.tsx', '.js', '.jsx'] },
    module: {
      rules: [
        {
          test: /\.[tj]sx?$/,
          exclude: /node_modules/,
          use: {
            loader: 'swc-loader',
            options: {
              jsc: {
                baseUrl: src,
                target: 'es2018',
                parser: { syntax: 'typescript', tsx: true, decorators: false, dynamicImport: true },
                transform: { react: { runtime: 'automatic' } },
              },
            },
          },
        },
      ],
    },
    plugins: [
      new CopyWebpackPlugin({
        patterns: [
          {
            from: 'plugin.json',
            to: '.',
            transform: (content: Buffer) =>
              content
                .toString()
                .replace(/%VERSION%/g, pkg.version)
                .replace(/%TODAY%/g, new Date().toISOString().slice(0, 10)),
          },
          { from: path.join(root, 'README.md'), to: '.' },
          { from: path.join(root, 'LICENSE'), to: '.' },
          { from: 'img', to: 'img' },
        ],
      }),
    ],
    performance: { hints: false },
  };
};

function readPluginID(): string {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require(path.join(src, 'plugin.json')).id;
}
