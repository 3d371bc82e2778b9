import { DataQueryRequest, DataSourceInstanceSettings } from '@grafana/data';
import { firstValueFrom } from 'rxjs';

import { VariableQueryEditor } from './components/VariableQueryEditor';
import { plugin } from './module';
import { SlurmOptions, SlurmQuery } from './types';
import { SlurmDataSource, SlurmVariableSupport } from './variables';

// What the datasource's constructor reads of its settings.
const settings = { uid: 'slurmscope', jsonData: {}, meta: {} } as unknown as DataSourceInstanceSettings<SlurmOptions>;

describe('variables', () => {
  it('list attribute values, whatever query type the variable was saved with', async () => {
    const asked: Array<[SlurmQuery, unknown, unknown]> = [];
    const v = new SlurmVariableSupport({
      attributeValues: async (q, range, scopedVars) => {
        asked.push([q, range, scopedVars]);
        return [{ text: 'n1', value: 'n1' }];
      },
    });
    const range = { from: 1, to: 2 };
    const scopedVars = { job: { text: '7', value: '7' } };
    const request = {
      targets: [{ refId: 'v', queryType: 'flamegraph', attribute: 'host.name', filter: 'slurm.job.id == $job' }],
      range,
      scopedVars,
    } as unknown as DataQueryRequest<SlurmQuery>;
    expect(await firstValueFrom(v.query(request))).toEqual({ data: [{ text: 'n1', value: 'n1' }] });
    expect(asked).toEqual([
      [
        { refId: 'v', queryType: 'attributeValues', attribute: 'host.name', filter: 'slurm.job.id == $job' },
        range,
        scopedVars,
      ],
    ]);
  });

  it('fail as the values do', async () => {
    const v = new SlurmVariableSupport({ attributeValues: () => Promise.reject(new Error('backend down')) });
    const request = { targets: [{ refId: 'v' }] } as unknown as DataQueryRequest<SlurmQuery>;
    await expect(firstValueFrom(v.query(request))).rejects.toThrow('backend down');
  });

  it('come with the datasource Grafana creates', () => {
    expect(plugin.DataSourceClass).toBe(SlurmDataSource);
    const ds = new SlurmDataSource(settings);
    expect(ds.variables).toBeInstanceOf(SlurmVariableSupport);
    expect((ds.variables as SlurmVariableSupport).editor).toBe(VariableQueryEditor);
  });
});
