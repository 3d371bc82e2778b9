// Template variables: the values of one attribute under a filter, with
// their own editor. Apart from datasource.ts, so that the datasource's
// data half loads no React component.
import {
  CustomVariableSupport,
  DataQueryRequest,
  DataQueryResponse,
  DataSourceInstanceSettings,
  MetricFindValue,
} from '@grafana/data';
import { map, Observable } from 'rxjs';

import { VariableQueryEditor } from './components/VariableQueryEditor';
import { DataSource } from './datasource';
import { QueryType, SlurmOptions, SlurmQuery } from './types';

export class SlurmVariableSupport extends CustomVariableSupport<DataSource, SlurmQuery> {
  editor = VariableQueryEditor;

  constructor(private readonly datasource: Pick<DataSource, 'attributeValues'>) {
    super();
  }

  query(request: DataQueryRequest<SlurmQuery>): Observable<DataQueryResponse> {
    const q = { ...request.targets[0], queryType: QueryType.AttributeValues };
    return new Observable<MetricFindValue[]>((sub) => {
      this.datasource
        .attributeValues(q, request.range, request.scopedVars)
        .then((v) => {
          sub.next(v);
          sub.complete();
        })
        .catch((e) => sub.error(e));
    }).pipe(map((values) => ({ data: values })));
  }
}

/** The class Grafana creates (module.ts): the datasource with its variables. */
export class SlurmDataSource extends DataSource {
  constructor(instanceSettings: DataSourceInstanceSettings<SlurmOptions>) {
    super(instanceSettings);
    this.variables = new SlurmVariableSupport(this);
  }
}
