import { SelectableValue } from '@grafana/data';
import { InlineField, InlineFieldRow, Input, Select } from '@grafana/ui';
import React from 'react';

import { Rank } from '../../types';
import { LABEL_WIDTH, SubEditorProps, useAttributeOptions } from './fields';

const rankOptions: Array<SelectableValue<Rank>> = [
  { value: 'cpuTime', label: 'CPU time' },
  { value: 'gpuTime', label: 'GPU time', description: 'CUDA kernel time from the GPU profiles' },
  { value: 'gpuUtilization', label: 'GPU utilisation', description: 'Mean utilisation of the GPUs allocated' },
  {
    value: 'wastedCoreHours',
    label: 'Wasted core-hours',
    description: 'Allocated cores left unused, times the hours (by job, user, name or node)',
  },
  {
    value: 'wastedGPUHours',
    label: 'Wasted GPU-hours',
    description: 'Allocated GPU-hours not used (by job, user, name or node)',
  },
];

/** topEntities: jobs, users or nodes ranked by a measure. */
export function TopEntitiesEditor({ query, update, datasource }: SubEditorProps) {
  const attributeOptions = useAttributeOptions(datasource);
  return (
    <InlineFieldRow>
      <InlineField label="Rank" labelWidth={LABEL_WIDTH}>
        <Select
          inputId="slurmscope-entity"
          aria-label="Entity"
          width={24}
          options={attributeOptions}
          value={query.entity ?? null}
          placeholder="job id"
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
  );
}
