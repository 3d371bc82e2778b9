import { QueryEditorProps, SelectableValue } from '@grafana/data';
import { InlineField, InlineFieldRow, Input, MultiSelect, RadioButtonGroup, Select, Stack } from '@grafana/ui';
import React, { useEffect, useMemo, useState } from 'react';

import type { DataSource } from '../datasource';
import {
  Aggregation,
  AttributeInfo,
  DEFAULT_MAX_NODES,
  MAX_MAX_NODES,
  MetricInfo,
  ProfileTypeInfo,
  QueryType,
  queryTypeOptions,
  Rank,
  SlurmOptions,
  SlurmQuery,
} from '../types';
import { FilterField } from './FilterField';

export type Props = QueryEditorProps<DataSource, SlurmQuery, SlurmOptions>;

const LABEL_WIDTH = 16;

const aggregationOptions: Array<SelectableValue<Aggregation>> = [
  { value: 'avg', label: 'avg' },
  { value: 'sum', label: 'sum' },
  { value: 'max', label: 'max' },
  { value: 'min', label: 'min' },
];

const rankOptions: Array<SelectableValue<Rank>> = [
  { value: 'cpuTime', label: 'CPU time' },
  { value: 'gpuTime', label: 'GPU time', description: 'CUDA kernel time from the GPU profiles' },
  { value: 'gpuUtilization', label: 'GPU utilisation', description: 'Mean utilisation of the GPUs allocated' },
];

/** validMaxNodes says why n is not a usable node budget, or undefined. */
export function maxNodesError(n: number | undefined): string | undefined {
  if (n === undefined) {
    return undefined;
  }
  if (!Number.isInteger(n) || n < 1 || n > MAX_MAX_NODES) {
    return `Max nodes must be a whole number from 1 to ${MAX_MAX_NODES}`;
  }
  return undefined;
}

/** windowError says why w is not a Prometheus duration, or undefined. */
export function windowError(w: string | undefined): string | undefined {
  if (!w || /^([0-9]+(ms|s|m|h|d|w|y))+$/.test(w) || /^\$/.test(w)) {
    return undefined;
  }
  return 'A window is a Prometheus duration such as 5m or 1h30m';
}

export function QueryEditor({ query, onChange, onRunQuery, datasource, range }: Props) {
  const queryType = query.queryType ?? QueryType.Flamegraph;
  const [attributes, setAttributes] = useState<AttributeInfo[]>([]);
  const [metrics, setMetrics] = useState<MetricInfo[]>([]);
  const [profileTypes, setProfileTypes] = useState<ProfileTypeInfo[]>([]);
  const [maxNodesText, setMaxNodesText] = useState(query.maxNodes ? String(query.maxNodes) : '');
  const [windowText, setWindowText] = useState(query.window ?? '');

  useEffect(() => {
    let live = true;
    datasource.attributes().then((a) => live && setAttributes(a), () => {});
    datasource.metrics().then((m) => live && setMetrics(m), () => {});
    return () => {
      live = false;
    };
  }, [datasource]);

  const needsProfileType = queryType === QueryType.Flamegraph || queryType === QueryType.ProfileSeries;
  useEffect(() => {
    if (!needsProfileType) {
      return;
    }
    let live = true;
    datasource.profileTypes(range).then((p) => live && setProfileTypes(p), () => {});
    return () => {
      live = false;
    };
    // The range changes on every refresh; profile types rarely do.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [datasource, needsProfileType]);

  const attributeOptions = useMemo(
    () => attributes.map((a) => ({ value: a.name, label: a.name, description: a.description })),
    [attributes]
  );

  const update = (patch: Partial<SlurmQuery>, run = true) => {
    onChange({ ...query, ...patch });
    if (run) {
      onRunQuery();
    }
  };

  const profileTypeOptions: Array<SelectableValue<string>> = profileTypes.map((p) => ({ value: p.id, label: p.name, description: p.id }));
  if (query.profileType && !profileTypes.some((p) => p.id === query.profileType)) {
    profileTypeOptions.push({ value: query.profileType, label: query.profileType });
  }
  const metricOptions: Array<SelectableValue<string>> = metrics.map((m) => ({
    value: m.name,
    label: m.name,
    description: m.level === 'job' ? 'per job' : 'per GPU; filters on jobs reach it through the allocation',
  }));
  const maxNodes = maxNodesText === '' ? undefined : Number(maxNodesText);
  const maxNodesInvalid = maxNodesError(maxNodes);
  const winInvalid = windowError(windowText.trim());

  return (
    <Stack direction="column" gap={1}>
      <InlineFieldRow>
        <InlineField label="Query type" labelWidth={LABEL_WIDTH}>
          <RadioButtonGroup
            options={queryTypeOptions}
            value={queryType}
            onChange={(v) => update({ queryType: v })}
            size="sm"
          />
        </InlineField>
      </InlineFieldRow>
      <InlineFieldRow>
        <InlineField
          label="Filter"
          labelWidth={LABEL_WIDTH}
          grow
          tooltip="CEL over the SLURM attributes: ==, !=, in [...], matches(), startsWith(), endsWith(), contains(), &&, ||, !. Dashboard variables ($job, $user) are inserted as escaped literals; a multi-value variable after == becomes in [...]. Ctrl+Space suggests, Shift+Enter runs."
        >
          <FilterField
            value={query.filter ?? ''}
            onChange={(filter) => onChange({ ...query, filter })}
            onRun={onRunQuery}
            backend={datasource}
            range={range}
          />
        </InlineField>
      </InlineFieldRow>

      {needsProfileType && (
        <InlineFieldRow>
          <InlineField label="Profile type" labelWidth={LABEL_WIDTH} tooltip="Empty: the datasource's default (CPU)">
            <Select
              inputId="slurmscope-profile-type"
              aria-label="Profile type"
              width={48}
              options={profileTypeOptions}
              value={query.profileType ?? null}
              isClearable
              allowCustomValue
              placeholder="default (process_cpu)"
              onChange={(v) => update({ profileType: v?.value || undefined })}
            />
          </InlineField>
          {queryType === QueryType.Flamegraph && (
            <InlineField
              label="Max nodes"
              labelWidth={LABEL_WIDTH}
              invalid={Boolean(maxNodesInvalid)}
              error={maxNodesInvalid}
              tooltip={`Flame graph node budget; the smallest are merged into "other". Default ${DEFAULT_MAX_NODES}.`}
            >
              <Input
                aria-label="Max nodes"
                type="number"
                width={14}
                min={1}
                max={MAX_MAX_NODES}
                placeholder={String(DEFAULT_MAX_NODES)}
                value={maxNodesText}
                onChange={(e) => setMaxNodesText(e.currentTarget.value)}
                onBlur={() => {
                  if (!maxNodesError(maxNodes)) {
                    update({ maxNodes });
                  }
                }}
              />
            </InlineField>
          )}
        </InlineFieldRow>
      )}

      {queryType === QueryType.GPUMetric && (
        <InlineFieldRow>
          <InlineField label="Metric" labelWidth={LABEL_WIDTH}>
            <Select
              inputId="slurmscope-metric"
              aria-label="Metric"
              width={48}
              options={metricOptions}
              value={query.metric ?? null}
              onChange={(v) => {
                const m = metrics.find((x) => x.name === v?.value);
                update({ metric: v?.value, aggregation: query.aggregation ?? m?.aggregation });
              }}
            />
          </InlineField>
          <InlineField label="Aggregation" labelWidth={12}>
            <Select
              inputId="slurmscope-aggregation"
              aria-label="Aggregation"
              width={12}
              options={aggregationOptions}
              value={query.aggregation ?? null}
              placeholder="metric's"
              onChange={(v) => update({ aggregation: v?.value })}
            />
          </InlineField>
          <InlineField label="Window" labelWidth={10} invalid={Boolean(winInvalid)} error={winInvalid} tooltip="Average each series over a trailing window, e.g. 30m">
            <Input
              aria-label="Window"
              width={10}
              placeholder="none"
              value={windowText}
              onChange={(e) => setWindowText(e.currentTarget.value)}
              onBlur={() => {
                const w = windowText.trim() || undefined;
                if (!windowError(w)) {
                  update({ window: w });
                }
              }}
            />
          </InlineField>
        </InlineFieldRow>
      )}

      {(queryType === QueryType.ProfileSeries || queryType === QueryType.GPUMetric) && (
        <InlineFieldRow>
          <InlineField label="Group by" labelWidth={LABEL_WIDTH} tooltip="Without host.name, series are merged across nodes">
            <MultiSelect
              inputId="slurmscope-group-by"
              aria-label="Group by"
              width={60}
              options={attributeOptions}
              value={query.groupBy ?? []}
              onChange={(vs) => update({ groupBy: vs.map((v) => v.value!).filter(Boolean) })}
            />
          </InlineField>
        </InlineFieldRow>
      )}

      {queryType === QueryType.TopEntities && (
        <InlineFieldRow>
          <InlineField label="Rank" labelWidth={LABEL_WIDTH}>
            <Select
              inputId="slurmscope-entity"
              aria-label="Entity"
              width={24}
              options={attributeOptions}
              value={query.entity ?? null}
              placeholder="slurm.job.id"
              onChange={(v) => update({ entity: v?.value })}
            />
          </InlineField>
          <InlineField label="by" labelWidth={6}>
            <Select
              inputId="slurmscope-rank-by"
              aria-label="Rank by"
              width={20}
              options={rankOptions}
              value={query.rankBy ?? 'cpuTime'}
              onChange={(v) => update({ rankBy: v?.value })}
            />
          </InlineField>
          <InlineField label="Limit" labelWidth={8}>
            <Input
              aria-label="Limit"
              type="number"
              width={10}
              min={0}
              placeholder="10"
              defaultValue={query.limit ?? ''}
              onBlur={(e) => {
                const n = e.currentTarget.value === '' ? undefined : Number(e.currentTarget.value);
                if (n === undefined || (Number.isInteger(n) && n >= 0)) {
                  update({ limit: n });
                }
              }}
            />
          </InlineField>
        </InlineFieldRow>
      )}

      {queryType === QueryType.AttributeValues && (
        <InlineFieldRow>
          <InlineField label="Attribute" labelWidth={LABEL_WIDTH}>
            <Select
              inputId="slurmscope-attribute"
              aria-label="Attribute"
              width={32}
              options={attributeOptions}
              value={query.attribute ?? null}
              onChange={(v) => update({ attribute: v?.value })}
            />
          </InlineField>
        </InlineFieldRow>
      )}
    </Stack>
  );
}
