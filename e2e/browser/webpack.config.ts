// Bundles the browser test's page (harness.tsx) into e2e/browser/dist:
// index.html, harness.js and the icons @grafana/ui loads at run time.
// Unlike the plugin's build (.config/webpack.config.ts), nothing is
// external: the page is its own Grafana, so React, @grafana/* and rxjs are
// bundled, each exactly once.
//
//   npx webpack -c e2e/browser/webpack.config.ts            (development)
//   npx webpack -c e2e/browser/webpack.config.ts --env production
import { createRequire } from 'node:module';
import path from 'node:path';

import CopyWebpackPlugin from 'copy-webpack-plugin';
import webpack, { type Configuration } from 'webpack';

// webpack-cli loads this file through ts-node, as CommonJS with
// tsconfig.json's "ts-node" options (then __dirname is defined), or as an
// ES module without them (then it is not, and webpack runs from the
// repository root). import.meta would make Node load the CommonJS output
// as an ES module, so it is not used.
const here = typeof __dirname === 'string' ? __dirname : path.resolve('e2e/browser');
const root = path.resolve(here, '../..');
const requireFromRoot = createRequire(path.join(root, 'package.json'));

/** The root node_modules copy of a package (its folder). */
function rootPackage(name: string): string {
  return path.dirname(requireFromRoot.resolve(`${name}/package.json`));
}

/** Packages of which the bundle must hold one copy, the root's. */
const singletons = ['react', 'react-dom', '@grafana/ui', '@grafana/data', '@grafana/runtime', '@grafana/schema', '@emotion/css', '@emotion/react', 'rxjs'];
const shared = new RegExp(`^(${singletons.map((n) => n.replace(/[/.]/g, '\\$&')).join('|')})(/.*)?$`);

export default (env: Record<string, unknown> = {}): Configuration => {
  const production = Boolean(env.production);
  return {
    mode: production ? 'production' : 'development',
    // Source maps make a stack trace in the test's output readable; the
    // cheap ones keep the build fast.
    devtool: production ? false : 'cheap-module-source-map',
    context: here,
    target: 'web',
    entry: { harness: './harness.tsx' },
    output: {
      path: path.join(here, 'dist'),
      filename: '[name].js',
      chunkFilename: 'chunks/[name].js',
      publicPath: '/',
      // dist/harness is the Go server run.mjs builds; keep it.
      clean: { keep: /^harness$/ },
    },
    resolve: {
      extensions: ['.ts', '.tsx', '.js', '.jsx', '.mjs'],
    },
    module: {
      rules: [
        {
          test: /\.[cm]?[tj]sx?$/,
          exclude: /node_modules/,
          use: {
            loader: 'swc-loader',
            options: {
              jsc: {
                target: 'es2020',
                parser: { syntax: 'typescript', tsx: true, decorators: false, dynamicImport: true },
                transform: { react: { runtime: 'automatic' } },
              },
            },
          },
        },
        // Grafana's ESM builds (.mjs) import CommonJS packages the way a
        // bundler allows and Node does not: `import Scrollbars from
        // 'react-custom-scrollbars-2'` must get module.exports.default, not
        // module.exports (which webpack's strict .mjs handling gives, and
        // @grafana/ui's CustomScrollbar then renders an object). Grafana's
        // own build treats them as javascript/auto too.
        { test: /\.m?js$/, include: /node_modules/, type: 'javascript/auto', resolve: { fullySpecified: false } },
        { test: /\.css$/, use: ['style-loader', 'css-loader'] },
        { test: /\.(woff2?|ttf|eot|otf)$/, type: 'asset/resource', generator: { filename: 'public/fonts/[name][ext]' } },
        { test: /\.(svg|png|jpe?g|gif)$/, type: 'asset/resource', generator: { filename: 'public/img/[name].[contenthash:8][ext]' } },
      ],
    },
    plugins: [
      // One React, one @grafana/ui, one @grafana/data (and so on) in the
      // bundle, the root's, whoever imports them. @grafana/flamegraph
      // declares its own versions; package.json's overrides make npm share
      // the root's, and this makes the bundle do so even if a nested copy
      // appears: two Reacts break hooks, two @grafana/data break
      // ThemeContext. It is resolve.alias in effect, but an alias to a
      // folder bypasses the package's "exports" (so @grafana/data/unstable
      // and react/jsx-runtime would not resolve): instead, these requests
      // are resolved from the repository root, with the usual rules.
      new webpack.NormalModuleReplacementPlugin(shared, (resolveData: { context: string }) => {
        resolveData.context = root;
      }),
      new webpack.DefinePlugin({
        // Libraries read process.env.X here and there; NODE_ENV itself is
        // set by mode (the more specific key wins).
        'process.env': JSON.stringify({}),
      }),
      new CopyWebpackPlugin({
        patterns: [
          { from: 'index.html', to: '.' },
          // @grafana/ui's <Icon> fetches its SVGs from
          // window.__grafana_public_path__ + "build/img/icons/" at run time.
          { from: path.join(rootPackage('@grafana/ui'), 'dist/public/img/icons'), to: 'public/build/img/icons' },
        ],
      }),
    ],
    performance: { hints: false },
    ignoreWarnings: [{ message: /size limit/ }],
    stats: 'errors-warnings',
  };
};
