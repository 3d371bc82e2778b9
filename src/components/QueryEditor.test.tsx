import { act, fireEvent, render, screen, waitFor } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import React, { useState } from 'react';

import type { DataSource } from '../datasource';
import { ProfileTypeInfo, SlurmQuery } from '../types';
import { sideTimeError } from './query/DiffEditor';
import { maxNodesError } from './query/FlamegraphEditor';
import { windowError } from './query/GPUMetricEditor';
import { QueryEditor } from './QueryEditor';
import { VariableQueryEditor } from './VariableQueryEditor';

const cpuOnly: ProfileTypeInfo[] = [{ id: 'process_cpu:cpu:nanoseconds:cpu:nanoseconds', name: 'process_cpu / cpu' }];

// The editor only calls the resource methods; a hand-written fake stands in.
function fakeDatasource(defaultProfileType?: string, profileTypes = cpuOnly) {
  const calls: string[] = [];
  const ds = {
    defaultProfileType: () => defaultProfileType,
    attributes: async () => {
      calls.push('attributes');
      return [
        { name: 'slurm.job.id', type: 'string', description: 'job id' },
        { name: 'slurm.job.user', type: 'string', description: 'user' },
        { name: 'host.name', type: 'string', description: 'node' },
      ];
    },
    metrics: async () => {
      calls.push('metrics');
      return [
        { name: 'slurmscope_job_gpu_utilization_ratio', level: 'job', unit: 'percentunit', aggregation: 'avg' },
        { name: 'slurmscope_gpu_memory_used_bytes', level: 'gpu', unit: 'bytes', aggregation: 'sum' },
      ];
    },
    profileTypes: async () => {
      calls.push('profileTypes');
      return profileTypes;
    },
    values: async () => [],
    validate: async () => ({ ok: true }),
  };
  return { ds: ds as unknown as DataSource, calls };
}

function Harness({ initial, onRun = () => {}, ds }: { initial: SlurmQuery; onRun?: () => void; ds: DataSource }) {
  const [q, setQ] = useState(initial);
  return (
    <>
      <QueryEditor query={q} onChange={setQ} onRunQuery={onRun} datasource={ds} />
      <output data-testid="query">{JSON.stringify(q)}</output>
    </>
  );
}

const current = () => JSON.parse(screen.getByTestId('query').textContent!);

async function choose(label: string, option: string) {
  const input = screen.getByLabelText(label);
  await userEvent.click(input);
  await userEvent.type(input, option);
  await userEvent.keyboard('{Enter}');
}

describe('QueryEditor', () => {
  it('edits a flame graph query', async () => {
    const { ds, calls } = fakeDatasource();
    const onRun = jest.fn();
    render(<Harness ds={ds} onRun={onRun} initial={{ refId: 'A', queryType: 'flamegraph', filter: '' }} />);
    await waitFor(() => expect(calls).toContain('profileTypes'));
    await userEvent.type(screen.getByTestId('slurmscope-filter-input'), 'slurm.job.id == "1"');
    expect(current().filter).toBe('slurm.job.id == "1"');
    const max = screen.getByLabelText('Max nodes');
    await userEvent.type(max, '70000');
    fireEvent.blur(max);
    expect(await screen.findByText(/whole number from 1 to 65536/)).toBeInTheDocument();
    expect(current().maxNodes).toBeUndefined();
    await userEvent.clear(max);
    await userEvent.type(max, '512');
    fireEvent.blur(max);
    expect(current().maxNodes).toBe(512);
    expect(onRun).toHaveBeenCalled();
    // Profile and metric fields of other types stay hidden.
    expect(screen.queryByLabelText('Metric')).toBeNull();
    expect(screen.queryByLabelText('Group by')).toBeNull();
  });

  it('switches to a metric query with group-by', async () => {
    const { ds } = fakeDatasource();
    render(<Harness ds={ds} initial={{ refId: 'A', queryType: 'flamegraph' }} />);
    await userEvent.click(screen.getByRole('radio', { name: 'Metrics' }));
    expect(current().queryType).toBe('gpuMetric');
    await act(() => Promise.resolve());
    await choose('Metric', 'slurmscope_gpu_memory');
    expect(current().metric).toBe('slurmscope_gpu_memory_used_bytes');
    expect(current().aggregation).toBe('sum'); // the metric's own
    await choose('Group by', 'host.name');
    expect(current().groupBy).toEqual(['host.name']);
    const win = screen.getByLabelText('Window');
    await userEvent.type(win, '30 minutes');
    fireEvent.blur(win);
    expect(await screen.findByText(/Prometheus duration/)).toBeInTheDocument();
    expect(current().window).toBeUndefined();
    await userEvent.clear(win);
    await userEvent.type(win, '30m');
    fireEvent.blur(win);
    expect(current().window).toBe('30m');
    expect(screen.queryByLabelText('Max nodes')).toBeNull();
  });

  it('shows the fields of profile series and attribute values queries', async () => {
    const { ds } = fakeDatasource();
    render(<Harness ds={ds} initial={{ refId: 'A', queryType: 'profileSeries' }} />);
    await act(() => Promise.resolve());
    expect(screen.getByLabelText('Profile type')).toBeInTheDocument();
    await choose('Group by', 'slurm.job.user');
    expect(current().groupBy).toEqual(['slurm.job.user']);
    expect(screen.queryByLabelText('Max nodes')).toBeNull();
    await userEvent.click(screen.getByRole('radio', { name: 'Attribute values' }));
    await act(() => Promise.resolve());
    await choose('Attribute', 'host.name');
    expect(current()).toMatchObject({ queryType: 'attributeValues', attribute: 'host.name', groupBy: ['slurm.job.user'] });
    expect(screen.queryByLabelText('Profile type')).toBeNull();
  });

  it("names the datasource's default profile type, by the name Pyroscope gives it", async () => {
    const set = fakeDatasource('process_cpu:cpu:nanoseconds:cpu:nanoseconds');
    const { unmount } = render(<Harness ds={set.ds} initial={{ refId: 'A', queryType: 'flamegraph' }} />);
    // The name arrives with the profile types (a generous wait: a limit, not an assertion).
    expect(await screen.findByText('default (process_cpu / cpu)', {}, { timeout: 20_000 })).toBeInTheDocument();
    unmount();
    render(<Harness ds={fakeDatasource().ds} initial={{ refId: 'A', queryType: 'flamegraph' }} />);
    expect(await screen.findByText("the datasource's default", {}, { timeout: 20_000 })).toBeInTheDocument();
  });

  it('offers blocked and runnable off-CPU time as two profile types, each saying what it measures', async () => {
    // As GET /profile-types lists them: one type per sample type of the agent's off_cpu profile.
    const blocked = 'off_cpu:blocked:nanoseconds:off_cpu:nanoseconds';
    const runnable = 'off_cpu:runnable:nanoseconds:off_cpu:nanoseconds';
    const { ds, calls } = fakeDatasource(undefined, [
      ...cpuOnly,
      { id: blocked, name: 'Off-CPU time, blocked', description: 'Time threads spent blocked (sleeping, on I/O, a lock, a socket).' },
      { id: runnable, name: 'Off-CPU time, waiting for a CPU', description: 'Time threads were runnable but not running.' },
    ]);
    render(<Harness ds={ds} initial={{ refId: 'A', queryType: 'flamegraph' }} />);
    await waitFor(() => expect(calls).toContain('profileTypes'));
    await userEvent.click(screen.getByLabelText('Profile type'));
    expect(await screen.findByText('Off-CPU time, blocked')).toBeInTheDocument();
    expect(screen.getByText('Off-CPU time, waiting for a CPU')).toBeInTheDocument();
    expect(screen.getByText(`Time threads spent blocked (sleeping, on I/O, a lock, a socket). (${blocked})`)).toBeInTheDocument();
    expect(screen.getByText(`Time threads were runnable but not running. (${runnable})`)).toBeInTheDocument();
    await userEvent.keyboard('{Escape}');
    await choose('Profile type', 'Off-CPU time, waiting');
    expect(current().profileType).toBe(runnable);
    await choose('Profile type', 'Off-CPU time, blocked');
    expect(current().profileType).toBe(blocked);
  });

  it('edits a findings query, for a table or for alerts', async () => {
    const { ds } = fakeDatasource();
    const onRun = jest.fn();
    render(<Harness ds={ds} onRun={onRun} initial={{ refId: 'A', queryType: 'flamegraph' }} />);
    await userEvent.click(screen.getByRole('radio', { name: 'Findings' }));
    expect(current().queryType).toBe('findings');
    // Every finding, as a table, until told otherwise.
    expect(screen.getByText('every finding')).toBeInTheDocument();
    expect(screen.getByRole('radio', { name: 'Table' })).toBeChecked();
    await choose('Finding', 'Idle GPUs');
    expect(current().finding).toBe('gpuIdle');
    await userEvent.click(screen.getByRole('radio', { name: 'Numbers' }));
    expect(current()).toMatchObject({ queryType: 'findings', finding: 'gpuIdle', format: 'numeric' });
    expect(onRun).toHaveBeenCalled();
    // Fields of other types stay hidden.
    expect(screen.queryByLabelText('Metric')).toBeNull();
    expect(screen.queryByLabelText('Profile type')).toBeNull();
  });

  it('edits a diff query: two sides, each its own filter and range', async () => {
    const { ds } = fakeDatasource();
    const onRun = jest.fn();
    render(<Harness ds={ds} onRun={onRun} initial={{ refId: 'A', queryType: 'flamegraph' }} />);
    await userEvent.click(screen.getByRole('radio', { name: 'Diff flame graph' }));
    expect(current().queryType).toBe('diff');
    await act(() => Promise.resolve());
    // The query's filter, then the baseline's and the comparison's.
    const [, left, right] = screen.getAllByTestId('slurmscope-filter-input');
    await userEvent.type(left, 'slurm.job.id == "1"');
    await userEvent.type(right, 'slurm.job.id == "2"');
    expect(current()).toMatchObject({ leftFilter: 'slurm.job.id == "1"', rightFilter: 'slurm.job.id == "2"' });
    const [, rightFrom] = screen.getAllByLabelText('From');
    await userEvent.type(rightFrom, 'yesterday');
    fireEvent.blur(rightFrom);
    expect(await screen.findByText(/Must be epoch milliseconds/)).toBeInTheDocument();
    expect(current().rightFrom).toBeUndefined();
    await userEvent.clear(rightFrom);
    await userEvent.type(rightFrom, '2026-11-29T00:00:00Z');
    fireEvent.blur(rightFrom);
    expect(current().rightFrom).toBe('2026-11-29T00:00:00Z');
    expect(onRun).toHaveBeenCalled();
    expect(screen.getByLabelText('Max nodes')).toBeInTheDocument();
    expect(screen.queryByLabelText('Metric')).toBeNull();
  });

  it('ranks users by wasted core-hours', async () => {
    const { ds } = fakeDatasource();
    render(<Harness ds={ds} initial={{ refId: 'A', queryType: 'topEntities' }} />);
    await act(() => Promise.resolve());
    await choose('Entity', 'slurm.job.user');
    await choose('Rank by', 'Wasted core');
    expect(current()).toMatchObject({ entity: 'slurm.job.user', rankBy: 'wastedCoreHours' });
  });

  it('ranks entities', async () => {
    const { ds } = fakeDatasource();
    render(<Harness ds={ds} initial={{ refId: 'A', queryType: 'topEntities' }} />);
    await act(() => Promise.resolve());
    await choose('Entity', 'slurm.job.user');
    await choose('Rank by', 'GPU time');
    const limit = screen.getByLabelText('Limit');
    await userEvent.type(limit, '5');
    fireEvent.blur(limit);
    expect(current()).toMatchObject({ entity: 'slurm.job.user', rankBy: 'gpuTime', limit: 5 });
  });
});

describe('field checks', () => {
  it.each([
    [undefined, undefined],
    [1, undefined],
    [65536, undefined],
    [0, 'Max nodes'],
    [65537, 'Max nodes'],
    [1.5, 'Max nodes'],
  ])('maxNodes %p', (n, want) => {
    const got = maxNodesError(n);
    expect(want ? got : got).toEqual(want ? expect.stringContaining(want) : undefined);
  });
  it.each([
    ['', true],
    ['1764500000000', true],
    ['2026-11-30T12:00:00Z', true],
    ['2026-11-30T12:00:00.5+01:00', true],
    ['${__from}', true],
    ['2026-11-30', false],
    ['now-1h', false],
  ])('side time %p', (s, ok) => {
    expect(sideTimeError(s) === undefined).toBe(ok);
  });
  it.each([
    ['', true],
    ['30m', true],
    ['1h30m', true],
    ['$window', true],
    ['30', false],
    ['half an hour', false],
  ])('window %p', (w, ok) => {
    expect(windowError(w) === undefined).toBe(ok);
  });
});

describe('VariableQueryEditor', () => {
  it('saves the attribute and, on blur, the filter', async () => {
    const { ds } = fakeDatasource();
    const onChange = jest.fn();
    render(<VariableQueryEditor datasource={ds} query={{ refId: 'v' }} onChange={onChange} onRunQuery={() => {}} />);
    await act(() => Promise.resolve());
    await choose('Attribute', 'slurm.job.id');
    expect(onChange).toHaveBeenLastCalledWith({ refId: 'v', attribute: 'slurm.job.id', queryType: 'attributeValues' });
    const f = screen.getByTestId('slurmscope-filter-input');
    await userEvent.type(f, 'slurm.job.user == $user');
    const before = onChange.mock.calls.length;
    fireEvent.blur(f);
    expect(onChange.mock.calls.length).toBe(before + 1);
    expect(onChange.mock.calls.at(-1)![0]).toMatchObject({ filter: 'slurm.job.user == $user', queryType: 'attributeValues' });
  });
});
