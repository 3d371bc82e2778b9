import { DataSourceInstanceSettings, ScopedVars } from '@grafana/data';
import type { TemplateSrv } from '@grafana/runtime';

import { DataSource, resolver } from './datasource';
import { QueryType, SlurmOptions, SlurmQuery } from './types';

// datasource.ts is the datasource's data half: loading it loads no React
// editor (its variable support, which has one, is in variables.ts).
jest.mock('./components/VariableQueryEditor', () => {
  throw new Error('datasource.ts loaded VariableQueryEditor');
});
jest.mock('./components/QueryEditor', () => {
  throw new Error('datasource.ts loaded QueryEditor');
});
jest.mock('./components/ConfigEditor', () => {
  throw new Error('datasource.ts loaded ConfigEditor');
});

// A template service that behaves like Grafana's for the cases here: it
// calls a format function with the raw value (an array for multi-value
// variables) and leaves anything that is not a variable untouched.
class FakeTemplateSrv implements Pick<TemplateSrv, 'replace'> {
  constructor(private vars: Record<string, string | string[]>) {}
  replace(target?: string, scopedVars?: ScopedVars, format?: string | Function): string {
    if (!target) {
      return '';
    }
    return target.replace(/\$\{?([A-Za-z_]\w*)(:\w+)?\}?/g, (ref, name: string, fmt?: string) => {
      const v = scopedVars?.[name]?.value ?? this.vars[name];
      if (v === undefined) {
        return ref;
      }
      if (fmt === ':json') {
        return JSON.stringify(v); // Grafana ignores the format function then
      }
      if (typeof format === 'function') {
        return format(v, { name });
      }
      return Array.isArray(v) ? `{${v.join(',')}}` : String(v);
    });
  }
}

const settings = {
  id: 1,
  uid: 'slurmscope',
  type: 'slurmscope-slurm-datasource',
  name: 'slurmscope',
  jsonData: {},
  access: 'proxy',
  readOnly: false,
  meta: {} as DataSourceInstanceSettings['meta'],
} as DataSourceInstanceSettings<SlurmOptions>;

function ds(vars: Record<string, string | string[]>) {
  return new DataSource(settings, new FakeTemplateSrv(vars));
}

describe('applyTemplateVariables', () => {
  it('builds the backend query with CEL-escaped variables', () => {
    const q: SlurmQuery = {
      refId: 'A',
      queryType: QueryType.GPUMetric,
      filter: 'slurm.job.id == $job && slurm.job.user == $user',
      metric: '$metric',
      window: '$win',
      groupBy: ['host.name'],
    };
    const out = ds({ job: ['1', '2'], user: 'a"b', metric: 'slurmscope_gpu_utilization_ratio', win: '30m' }).applyTemplateVariables(q, {});
    expect(out).toEqual({
      refId: 'A',
      queryType: 'gpuMetric',
      filter: 'slurm.job.id in ["1", "2"] && slurm.job.user == "a\\"b"',
      metric: 'slurmscope_gpu_utilization_ratio',
      window: '30m',
      groupBy: ['host.name'],
      profileType: undefined,
    });
  });

  it('prefers scoped variables (repeated panels)', () => {
    const scoped: ScopedVars = { host: { text: 'node-b', value: 'node-b' } };
    const out = ds({ host: ['node-a', 'node-b'] }).applyTemplateVariables({ refId: 'A', filter: 'host.name == $host' }, scoped);
    expect(out.filter).toBe('host.name == "node-b"');
  });

  it("interpolates both sides of a diff, filters CEL-escaped and ranges' ends plainly", () => {
    const q: SlurmQuery = {
      refId: 'A',
      queryType: QueryType.Diff,
      filter: 'slurm.job.id == $job',
      leftFilter: 'slurm.task.rank != $rank',
      rightFilter: 'slurm.task.rank == $rank',
      rightFrom: '$from',
      rightTo: '2026-11-30T12:00:00Z',
    };
    const out = ds({ job: '42', rank: '1"7', from: '1764500000000' }).applyTemplateVariables(q, {});
    expect(out).toMatchObject({
      filter: 'slurm.job.id == "42"',
      leftFilter: 'slurm.task.rank != "1\\"7"',
      rightFilter: 'slurm.task.rank == "1\\"7"',
      rightFrom: '1764500000000',
      rightTo: '2026-11-30T12:00:00Z',
    });
    expect(out.leftFrom).toBeUndefined();
  });

  it('leaves an empty filter empty', () => {
    expect(ds({}).applyTemplateVariables({ refId: 'A', filter: '' }, {}).filter).toBe('');
  });
});

describe('resolver', () => {
  it('tells variables from other text', () => {
    const r = resolver(new FakeTemplateSrv({ a: 'x', m: ['1'] }));
    expect(r('$a')).toBe('x');
    expect(r('${m}')).toEqual(['1']);
    expect(r('$nope')).toBeUndefined();
    // Grafana would apply an explicit format itself; CEL escaping wins.
    expect(r('${a:json}')).toBe('x');
    expect(r('${m:raw}')).toEqual(['1']);
  });
});

describe('attribute values for variables', () => {
  it('asks /values with the interpolated filter and the range', async () => {
    const d = ds({ user: 'bob' });
    const get = jest.spyOn(d, 'getResource').mockResolvedValue({ values: ['1', '2'] });
    const from = { valueOf: () => 1000 };
    const to = { valueOf: () => 2000 };
    const vs = await d.metricFindQuery(
      { refId: 'v', attribute: 'slurm.job.id', filter: 'slurm.job.user == $user' },
      { range: { from, to, raw: { from: '', to: '' } } as any }
    );
    expect(get).toHaveBeenCalledWith('values', { attribute: 'slurm.job.id', filter: 'slurm.job.user == "bob"', from: '1000', to: '2000' });
    expect(vs).toEqual([
      { text: '1', value: '1' },
      { text: '2', value: '2' },
    ]);
  });

  it('returns nothing without an attribute', async () => {
    const d = ds({});
    const get = jest.spyOn(d, 'getResource');
    expect(await d.metricFindQuery({ refId: 'v' })).toEqual([]);
    expect(get).not.toHaveBeenCalled();
  });

  it('validates through POST so long filters fit', async () => {
    const d = ds({});
    const post = jest.spyOn(d, 'postResource').mockResolvedValue({ ok: true });
    await d.validate('x'.repeat(10000));
    expect(post).toHaveBeenCalledWith('validate', { filter: 'x'.repeat(10000) });
  });
});

// Counts the resource calls; getResource is where DataSourceWithBackend
// would reach Grafana's backend service.
class CountingDataSource extends DataSource {
  asked: string[] = [];
  failNext = false;
  override async getResource<T>(path: string): Promise<T> {
    this.asked.push(path);
    if (this.failNext) {
      this.failNext = false;
      throw new Error('backend down');
    }
    return (path === 'attributes' ? [{ name: 'slurm.job.id', type: 'string', description: '' }] : []) as T;
  }
}

describe('fixed resources', () => {
  it('asks for the attribute schema and the metric list once per datasource', async () => {
    const d = new CountingDataSource(settings, new FakeTemplateSrv({}));
    const [a, b] = await Promise.all([d.attributes(), d.attributes()]);
    expect(await d.attributes()).toBe(a);
    expect(b).toBe(a);
    await d.metrics();
    await d.metrics();
    expect(d.asked).toEqual(['attributes', 'metrics']);
  });

  it('does not keep a failure', async () => {
    const d = new CountingDataSource(settings, new FakeTemplateSrv({}));
    d.failNext = true;
    await expect(d.attributes()).rejects.toThrow('backend down');
    expect(await d.attributes()).toEqual([{ name: 'slurm.job.id', type: 'string', description: '' }]);
    expect(d.asked).toEqual(['attributes', 'attributes']);
  });

  it("names the settings' default profile type, or none", () => {
    expect(new DataSource(settings, new FakeTemplateSrv({})).defaultProfileType()).toBeUndefined();
    const set = { ...settings, jsonData: { defaultProfileType: 'memory:alloc_space:bytes:space:bytes' } };
    expect(new DataSource(set, new FakeTemplateSrv({})).defaultProfileType()).toBe('memory:alloc_space:bytes:space:bytes');
  });
});
