import { QueryEditorProps } from '@grafana/data';
import { InlineField, InlineFieldRow, Select, Stack } from '@grafana/ui';
import React, { useState } from 'react';

import type { DataSource } from '../datasource';
import { QueryType, SlurmOptions, SlurmQuery } from '../types';
import { FilterField } from './FilterField';
import { useAttributeOptions } from './query/fields';

export type Props = QueryEditorProps<DataSource, SlurmQuery, SlurmOptions, SlurmQuery>;

/**
 * Variables list the values of one attribute under a filter, e.g. the job
 * ids of $user: attribute slurm.job.id, filter slurm.job.user == $user.
 */
export function VariableQueryEditor({ query, onChange, datasource, range }: Props) {
  const attributeOptions = useAttributeOptions(datasource);

  // The filter is saved (and the variable refreshed) on blur, not per key.
  const [filter, setFilter] = useState(query.filter ?? '');
  const save = (patch: Partial<SlurmQuery>) => onChange({ ...query, ...patch, queryType: QueryType.AttributeValues });

  return (
    <Stack direction="column" gap={1}>
      <InlineFieldRow>
        <InlineField label="Attribute" labelWidth={14} tooltip="Whose values the variable offers">
          <Select
            inputId="slurmscope-variable-attribute"
            aria-label="Attribute"
            width={32}
            options={attributeOptions}
            value={query.attribute ?? null}
            onChange={(v) => save({ attribute: v?.value })}
          />
        </InlineField>
      </InlineFieldRow>
      <InlineFieldRow>
        <InlineField label="Filter" labelWidth={14} grow tooltip="Only values of series this filter matches; may use other variables">
          <FilterField
            value={filter}
            onChange={setFilter}
            onRun={() => filter !== (query.filter ?? '') && save({ filter })}
            backend={datasource}
            range={range}
          />
        </InlineField>
      </InlineFieldRow>
    </Stack>
  );
}
