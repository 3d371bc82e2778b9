import { SelectableValue } from '@grafana/data';
import { InlineField, InlineFieldRow, RadioButtonGroup, Select } from '@grafana/ui';
import React from 'react';

import { FindingKind, FindingsFormat } from '../../types';
import { LABEL_WIDTH, SubEditorProps } from './fields';

/** The findings, in the backend's order (Go: findings.Kinds). */
export const findingOptions: Array<SelectableValue<FindingKind>> = [
  { value: 'oomKilled', label: 'OOM kills', description: 'Processes the kernel killed for the job exceeding its memory' },
  { value: 'gpuIdle', label: 'Idle GPUs', description: 'GPUs allocated but never busy' },
  { value: 'inputBound', label: 'Input bound', description: 'GPUs little busy while the CPUs are saturated' },
  {
    value: 'straggler',
    label: 'Straggling ranks',
    description: "A rank far over the median rank's time in one of its job's top functions (a table only)",
  },
  { value: 'cpuUnderused', label: 'Unused cores', description: 'Cores used far below those allocated' },
  { value: 'memoryNearLimit', label: 'Memory near its limit', description: 'Peak memory close to the request' },
  { value: 'memoryOverRequested', label: 'Memory over-requested', description: 'Peak memory far below the request' },
  { value: 'gpuMemoryUnderused', label: 'GPU memory unused', description: 'Device memory mostly unused' },
];

const formatOptions: Array<SelectableValue<FindingsFormat>> = [
  { value: 'table', label: 'Table', description: 'One row per finding, for dashboards' },
  { value: 'numeric', label: 'Numbers', description: 'One number per finding, labelled by its job, for alert rules' },
];

/** findings: what the matching jobs should change, as a table or as numbers for alerts. */
export function FindingsEditor({ query, update }: SubEditorProps) {
  return (
    <InlineFieldRow>
      <InlineField label="Finding" labelWidth={LABEL_WIDTH} tooltip="Empty: every finding. Thresholds are the datasource's settings.">
        <Select
          inputId="slurmscope-finding"
          aria-label="Finding"
          width={32}
          options={findingOptions}
          value={query.finding ?? null}
          isClearable
          placeholder="every finding"
          onChange={(v) => update({ finding: v?.value })}
        />
      </InlineField>
      <InlineField label="Format" labelWidth={10}>
        <RadioButtonGroup
          options={formatOptions}
          value={query.format ?? 'table'}
          onChange={(v) => update({ format: v })}
          size="sm"
        />
      </InlineField>
    </InlineFieldRow>
  );
}
