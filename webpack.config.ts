import CopyWebpackPlugin from 'copy-webpack-plugin';
import type { Configuration } from 'webpack';
import { merge } from 'webpack-merge';

import grafanaConfig, { type Env } from './.config/webpack/webpack.config';

// create-plugin's documented extension point: its managed config, plus the
// plugin's docs (plugin.json's docsPath), which the catalog reads from the
// archive; the agent's internals (docs/internals) are not the plugin's.
const config = async (env: Env): Promise<Configuration> => {
  const base = await grafanaConfig(env);
  return merge(base, {
    plugins: [
      new CopyWebpackPlugin({
        patterns: [{ from: '../docs', to: 'docs', globOptions: { ignore: ['**/internals/**'] } }],
      }),
    ],
  });
};

export default config;
