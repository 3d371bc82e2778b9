import { SelectableValue } from '@grafana/data';
import { InlineField, InlineFieldRow, Input, Select } from '@grafana/ui';
import React, { useState } from 'react';

import { Aggregation, MetricInfo } from '../../types';
import { useLoaded } from '../useLoaded';
import { GroupByField, LABEL_WIDTH, SubEditorProps } from './fields';

const aggregationOptions: Array<SelectableValue<Aggregation>> = [
  { value: 'avg', label: 'avg' },
  { value: 'sum', label: 'sum' },
  { value: 'max', label: 'max' },
  { value: 'min', label: 'min' },
];

/** windowError says why w is not a Prometheus duration, or undefined. */
export function windowError(w: string | undefined): string | undefined {
  if (!w || /^([0-9]+(ms|s|m|h|d|w|y))+$/.test(w) || /^\$/.test(w)) {
    return undefined;
  }
  return 'A window is a Prometheus duration such as 5m or 1h30m';
}

/** gpuMetric: one of the backend's GPU or host metrics, aggregated, per group. */
export function GPUMetricEditor(props: SubEditorProps) {
  const { query, update, datasource } = props;
  const metrics = useLoaded<MetricInfo>(() => datasource.metrics(), [datasource]);
  const [windowText, setWindowText] = useState(query.window ?? '');
  const winInvalid = windowError(windowText.trim());
  const metricOptions: Array<SelectableValue<string>> = metrics.map((m) => ({
    value: m.name,
    label: m.name,
    description:
      (m.level === 'job' ? 'per job' : 'per GPU; filters on jobs reach it through the allocation') +
      (m.type === 'counter' ? '; shown per second' : ''),
  }));
  return (
    <>
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
        <InlineField
          label="Window"
          labelWidth={10}
          invalid={Boolean(winInvalid)}
          error={winInvalid}
          tooltip="Average each series over a trailing window, e.g. 30m; for a counter, the window its rate is taken over"
        >
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
      <InlineFieldRow>
        <GroupByField {...props} />
      </InlineFieldRow>
    </>
  );
}
