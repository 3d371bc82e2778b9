import { InlineField, InlineFieldRow, Select } from '@grafana/ui';
import React from 'react';

import { LABEL_WIDTH, SubEditorProps, useAttributeOptions } from './fields';

/** attributeValues: the values of one attribute under the filter. */
export function AttributeValuesEditor({ query, update, datasource }: SubEditorProps) {
  const attributeOptions = useAttributeOptions(datasource);
  return (
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
  );
}
