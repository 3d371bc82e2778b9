import { CoreApp, DataSourceInstanceSettings, MetricFindValue, ScopedVars, TimeRange } from '@grafana/data';
import { DataSourceWithBackend, getTemplateSrv, TemplateSrv } from '@grafana/runtime';

import { interpolate, Resolve } from './interpolate';
import {
  AttributeInfo,
  defaultQuery,
  MetricInfo,
  ProfileTypeInfo,
  SlurmOptions,
  SlurmQuery,
  ValidateResult,
} from './types';

/** resolver turns Grafana's template service into an interpolate.Resolve. */
export function resolver(templateSrv: Pick<TemplateSrv, 'replace'>, scopedVars?: ScopedVars): Resolve {
  return (ref) => {
    // An explicit format (${job:json}) would make Grafana format the value
    // itself and skip ours; the filter always gets CEL escaping instead.
    ref = ref.replace(/^\$\{([^:}]+):[^}]*\}$/, '$${$1}').replace(/^\[\[([^:\]]+):[^\]]*\]\]$/, '[[$1]]');
    let captured: string | string[] | undefined;
    let called = false;
    templateSrv.replace(ref, scopedVars, (value: unknown) => {
      called = true;
      captured = Array.isArray(value) ? value.map(String) : value === undefined || value === null ? '' : String(value);
      return '';
    });
    return called ? captured : undefined;
  };
}

/**
 * The datasource's queries and resources. Its variable support, which
 * brings a React editor, is added by SlurmDataSource (variables.ts), the
 * class Grafana creates.
 */
export class DataSource extends DataSourceWithBackend<SlurmQuery, SlurmOptions> {
  constructor(
    instanceSettings: DataSourceInstanceSettings<SlurmOptions>,
    private readonly templateSrv: Pick<TemplateSrv, 'replace'> = getTemplateSrv()
  ) {
    super(instanceSettings);
    this.profileTypeDefault = instanceSettings.jsonData?.defaultProfileType || undefined;
  }

  private readonly profileTypeDefault?: string;

  getDefaultQuery(_app: CoreApp): Partial<SlurmQuery> {
    return defaultQuery;
  }

  filterQuery(q: SlurmQuery): boolean {
    return !q.hide;
  }

  /** Interpolates template variables with CEL escaping (see interpolate.ts). */
  applyTemplateVariables(q: SlurmQuery, scopedVars: ScopedVars): SlurmQuery {
    const resolve = resolver(this.templateSrv, scopedVars);
    const plain = (s?: string) => (s === undefined ? s : this.templateSrv.replace(s, scopedVars));
    const cel = (s?: string) => (s ? interpolate(s, resolve) : s);
    return {
      ...q,
      filter: cel(q.filter),
      profileType: plain(q.profileType),
      metric: plain(q.metric),
      window: plain(q.window),
      // A diff's two sides: filters like the query's, and their ranges' ends.
      leftFilter: cel(q.leftFilter),
      rightFilter: cel(q.rightFilter),
      leftFrom: plain(q.leftFrom),
      leftTo: plain(q.leftTo),
      rightFrom: plain(q.rightFrom),
      rightTo: plain(q.rightTo),
    };
  }

  interpolateVariablesInQueries(queries: SlurmQuery[], scopedVars: ScopedVars): SlurmQuery[] {
    return queries.map((q) => ({ ...this.applyTemplateVariables(q, scopedVars), datasource: this.getRef() }));
  }

  /** The profile type of queries that name none, where the settings set one. */
  defaultProfileType(): string | undefined {
    return this.profileTypeDefault;
  }

  // Resources the editors use (grafana-plugin/pkg/plugin/resources.go).

  /** The attribute schema: fixed while the backend runs, so asked once. */
  attributes(): Promise<AttributeInfo[]> {
    return this.once<AttributeInfo[]>('attributes');
  }

  /** The GPU metrics a gpuMetric query may name: asked once, like attributes(). */
  metrics(): Promise<MetricInfo[]> {
    return this.once<MetricInfo[]>('metrics');
  }

  private readonly fixed = new Map<string, Promise<unknown>>();

  /**
   * once asks for a resource that does not change while the backend runs,
   * the first time only: every editor of this datasource shares the answer.
   * A failure is not kept, so the next editor asks again.
   */
  private once<T>(path: string): Promise<T> {
    let p = this.fixed.get(path) as Promise<T> | undefined;
    if (!p) {
      p = this.getResource<T>(path);
      this.fixed.set(path, p);
      p.catch(() => this.fixed.delete(path));
    }
    return p;
  }

  profileTypes(range?: TimeRange): Promise<ProfileTypeInfo[]> {
    return this.getResource<ProfileTypeInfo[]>('profile-types', rangeParams(range));
  }

  async values(attribute: string, filter: string, range?: TimeRange): Promise<string[]> {
    const r = await this.getResource<{ values?: string[] }>('values', { attribute, filter, ...rangeParams(range) });
    return r.values ?? [];
  }

  /** Validates a filter as the backend compiles it: the one source of truth. */
  validate(filter: string): Promise<ValidateResult> {
    return this.postResource<ValidateResult>('validate', { filter });
  }

  /** Values of one attribute under a filter, for template variables. */
  async attributeValues(query: SlurmQuery, range?: TimeRange, scopedVars: ScopedVars = {}): Promise<MetricFindValue[]> {
    if (!query.attribute) {
      return [];
    }
    const filter = query.filter ? interpolate(query.filter, resolver(this.templateSrv, scopedVars)) : '';
    const vs = await this.values(query.attribute, filter, range);
    return vs.map((text) => ({ text, value: text }));
  }

  async metricFindQuery(query: SlurmQuery, options?: { range?: TimeRange; scopedVars?: ScopedVars }): Promise<MetricFindValue[]> {
    return this.attributeValues(query, options?.range, options?.scopedVars);
  }
}

function rangeParams(range?: TimeRange): Record<string, string> {
  if (!range) {
    return {};
  }
  return { from: String(range.from.valueOf()), to: String(range.to.valueOf()) };
}
