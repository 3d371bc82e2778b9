import { InlineField, InlineFieldRow, Input, Stack } from '@grafana/ui';
import React, { useState } from 'react';

import { SlurmQuery } from '../../types';
import { FilterField } from '../FilterField';
import { LABEL_WIDTH, MaxNodesField, ProfileTypeField, SubEditorProps } from './fields';

// RFC 3339 as the backend's time.Parse(time.RFC3339) takes it.
const rfc3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

/**
 * sideTimeError says why s is not an end of a side's range as the backend
 * reads it (epoch milliseconds or RFC 3339), or undefined: '' is the
 * panel's, and a dashboard variable ($__from, ${__to}) is left to it.
 */
export function sideTimeError(s: string): string | undefined {
  const t = s.trim();
  if (t === '' || t.includes('$') || /^\d+$/.test(t) || (rfc3339.test(t) && !Number.isNaN(Date.parse(t)))) {
    return undefined;
  }
  return 'Must be epoch milliseconds ($__from) or an RFC 3339 time (2026-11-30T12:00:00Z)';
}

type SideKey = 'left' | 'right';
type TimeKey = 'leftFrom' | 'leftTo' | 'rightFrom' | 'rightTo';

function SideTime({ query, update, field, label }: SubEditorProps & { field: TimeKey; label: string }) {
  const [text, setText] = useState(query[field] ?? '');
  const invalid = sideTimeError(text);
  return (
    <InlineField
      label={label}
      labelWidth={10}
      invalid={Boolean(invalid)}
      error={invalid}
      tooltip="Empty: the panel's. Epoch milliseconds ($__from) or RFC 3339."
    >
      <Input
        aria-label={label}
        width={28}
        placeholder="the panel's"
        value={text}
        onChange={(e) => setText(e.currentTarget.value)}
        onBlur={() => {
          if (!invalid) {
            update({ [field]: text.trim() || undefined } as Partial<SlurmQuery>);
          }
        }}
      />
    </InlineField>
  );
}

function Side(props: SubEditorProps & { side: SideKey; label: string; tooltip: string }) {
  const { query, update, datasource, range, side, label, tooltip } = props;
  const key = side === 'left' ? 'leftFilter' : 'rightFilter';
  return (
    <InlineFieldRow>
      <InlineField label={label} labelWidth={LABEL_WIDTH} grow tooltip={tooltip}>
        <FilterField
          value={query[key] ?? ''}
          onChange={(v) => update({ [key]: v }, false)}
          onRun={() => update({})}
          backend={datasource}
          range={range}
          placeholder="the query's filter alone"
        />
      </InlineField>
      <SideTime {...props} field={`${side}From`} label="From" />
      <SideTime {...props} field={`${side}To`} label="To" />
    </InlineFieldRow>
  );
}

/**
 * diff: two selections, each the query's filter and its own, over its own
 * range (the panel's where unset), compared in one flame graph.
 */
export function DiffEditor(props: SubEditorProps) {
  return (
    <Stack direction="column" gap={0}>
      <Side
        {...props}
        side="left"
        label="Baseline"
        tooltip="CEL ANDed with the filter above: the left side, what the other is compared with (slurm.job.id == $left, or slurm.task.rank != $rank)."
      />
      <Side
        {...props}
        side="right"
        label="Comparison"
        tooltip="CEL ANDed with the filter above: the right side, whose gains show red and losses green (slurm.job.id == $right, or slurm.task.rank == $rank)."
      />
      <InlineFieldRow>
        <ProfileTypeField {...props} />
        <MaxNodesField {...props} />
      </InlineFieldRow>
    </Stack>
  );
}
