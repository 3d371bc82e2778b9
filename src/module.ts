import { DataSourcePlugin } from '@grafana/data';

import { ConfigEditor } from './components/ConfigEditor';
import { QueryEditor } from './components/QueryEditor';
import { DataSource } from './datasource';
import { SlurmOptions, SlurmQuery, SlurmSecureOptions } from './types';
import { SlurmDataSource } from './variables';

export const plugin = new DataSourcePlugin<DataSource, SlurmQuery, SlurmOptions, SlurmSecureOptions>(SlurmDataSource)
  .setConfigEditor(ConfigEditor)
  .setQueryEditor(QueryEditor);
