import { InlineFieldRow } from '@grafana/ui';
import React from 'react';

import { GroupByField, ProfileTypeField, SubEditorProps } from './fields';

/** profileSeries: a profile type's totals over time, per group. */
export function ProfileSeriesEditor(props: SubEditorProps) {
  return (
    <>
      <InlineFieldRow>
        <ProfileTypeField {...props} />
      </InlineFieldRow>
      <InlineFieldRow>
        <GroupByField {...props} />
      </InlineFieldRow>
    </>
  );
}
