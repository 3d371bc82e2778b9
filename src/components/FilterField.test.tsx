import { act, fireEvent, render, screen, waitFor } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import React, { useState } from 'react';

import type { AttributeInfo, ValidateResult } from '../types';
import { FilterBackend, FilterField } from './FilterField';

// A hand-written backend: validates like the Go compiler would for the
// cases used here (unknown attribute names), and records the calls.
class FakeBackend implements FilterBackend {
  validated: string[] = [];
  valueCalls: string[] = [];
  pending?: (r: ValidateResult) => void;
  manual = false;
  down = false;

  attributes(): Promise<AttributeInfo[]> {
    return Promise.resolve([
      { name: 'slurm.job.id', type: 'string', description: 'job id' },
      { name: 'slurm.job.user', type: 'string', description: 'user' },
      { name: 'slurm.job.name', type: 'string', description: 'job name' },
      { name: 'host.name', type: 'string', description: 'node' },
    ]);
  }

  values(attribute: string): Promise<string[]> {
    this.valueCalls.push(attribute);
    return Promise.resolve(attribute === 'slurm.job.user' ? ['alice', 'bob', 'bo"b'] : []);
  }

  validate(filter: string): Promise<ValidateResult> {
    this.validated.push(filter);
    if (this.down) {
      return Promise.reject({ status: 502, data: { error: 'pyroscope: connection refused' } });
    }
    const r = judge(filter);
    if (this.manual) {
      return new Promise((res) => (this.pending = () => res(r)));
    }
    return Promise.resolve(r);
  }
}

function judge(filter: string): ValidateResult {
  const known = ['slurm.job.id', 'slurm.job.user', 'slurm.job.name', 'host.name'];
  const issues = [];
  const re = /[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+/g;
  const lines = filter.split('\n');
  for (let l = 0; l < lines.length; l++) {
    const stripped = lines[l].replace(/"(?:[^"\\]|\\.)*"/g, (s) => ' '.repeat(s.length));
    for (const m of stripped.matchAll(re)) {
      if (!known.includes(m[0])) {
        const col = [...lines[l].slice(0, m.index)].length + 1;
        issues.push({ line: l + 1, column: col, offset: 0, message: `unknown attribute ${m[0]}` });
      }
    }
  }
  return issues.length ? { ok: false, issues } : { ok: true };
}

function Harness({ backend, initial = '', onRun }: { backend: FilterBackend; initial?: string; onRun?: () => void }) {
  const [v, setV] = useState(initial);
  return (
    <>
      <FilterField value={v} onChange={setV} backend={backend} debounceMs={10} onRun={onRun} />
      <output data-testid="value">{v}</output>
    </>
  );
}

const input = () => screen.getByTestId('slurmscope-filter-input') as HTMLTextAreaElement;

describe('FilterField', () => {
  it('shows no issue for a valid filter', async () => {
    const b = new FakeBackend();
    render(<Harness backend={b} />);
    await userEvent.type(input(), 'slurm.job.user == "bob"');
    await waitFor(() => expect(b.validated).toContain('slurm.job.user == "bob"'));
    expect(screen.queryByTestId('slurmscope-filter-error')).toBeNull();
    expect(input()).toHaveAttribute('aria-invalid', 'false');
  });

  it('underlines the backend issue at its characters', async () => {
    const b = new FakeBackend();
    const text = 'slurm.job.user == "bob" && slurm.job.usr == "x"';
    render(<Harness backend={b} initial={text} />);
    const err = await screen.findByTestId('slurmscope-filter-error');
    expect(err).toHaveAttribute('data-offset', String(text.indexOf('slurm.job.usr')));
    expect(err).toHaveTextContent('slurm.job.usr');
    expect(screen.getByTestId('slurmscope-filter-issues')).toHaveTextContent('1:28 unknown attribute slurm.job.usr');
    expect(input()).toHaveAttribute('aria-invalid', 'true');
  });

  it('places issues after astral characters and on later lines', async () => {
    const b = new FakeBackend();
    const text = 'slurm.job.name == "🚀✓"\n  || slurm.job.nam == "x"';
    render(<Harness backend={b} initial={text} />);
    const err = await screen.findByTestId('slurmscope-filter-error');
    expect(err).toHaveAttribute('data-offset', String(text.indexOf('slurm.job.nam ')));
    expect(err).toHaveAttribute('data-line', '2');
    expect(err).toHaveTextContent(/^slurm\.job\.nam$/);
  });

  it('drops issues of older text and ignores a late answer', async () => {
    const b = new FakeBackend();
    b.manual = true;
    render(<Harness backend={b} initial="slurm.job.usr" />);
    await waitFor(() => expect(b.pending).toBeDefined());
    const late = b.pending!;
    b.pending = undefined;
    await userEvent.clear(input());
    await userEvent.type(input(), 'host.name');
    await waitFor(() => expect(b.pending).toBeDefined());
    act(() => b.pending!({ ok: true }));
    act(() => late({ ok: false }));
    await act(() => new Promise((r) => setTimeout(r, 50)));
    expect(screen.queryByTestId('slurmscope-filter-error')).toBeNull();
  });

  it('says when the filter cannot be checked', async () => {
    const b = new FakeBackend();
    b.down = true;
    render(<Harness backend={b} initial="host.name" />);
    expect(await screen.findByTestId('slurmscope-filter-unavailable')).toHaveTextContent('pyroscope: connection refused');
  });

  it('says nothing about an empty filter', async () => {
    const b = new FakeBackend();
    b.down = true;
    render(<Harness backend={b} initial="host.name" />);
    await screen.findByTestId('slurmscope-filter-unavailable');
    await userEvent.clear(input());
    expect(screen.queryByTestId('slurmscope-filter-unavailable')).toBeNull();
  });

  it('completes attribute names', async () => {
    const b = new FakeBackend();
    render(<Harness backend={b} />);
    await waitFor(() => expect(b.validated).toBeDefined());
    await act(() => Promise.resolve());
    await userEvent.type(input(), 'slurm.job.us');
    const list = await screen.findByTestId('slurmscope-filter-suggestions');
    const options = list.querySelectorAll('[role=option]');
    expect(Array.from(options).map((o) => o.firstChild?.textContent)).toEqual(['slurm.job.user']);
    await userEvent.keyboard('{Enter}');
    expect(screen.getByTestId('value')).toHaveTextContent(/^slurm\.job\.user$/);
    expect(screen.queryByTestId('slurmscope-filter-suggestions')).toBeNull();
  });

  it('completes values with CEL escaping and closes the literal', async () => {
    const b = new FakeBackend();
    render(<Harness backend={b} />);
    await act(() => Promise.resolve());
    await userEvent.type(input(), 'slurm.job.user == "bo');
    const list = await screen.findByTestId('slurmscope-filter-suggestions');
    await waitFor(() => expect(list.querySelectorAll('[role=option]')).toHaveLength(2));
    await userEvent.keyboard('{ArrowDown}{Enter}');
    expect(screen.getByTestId('value').textContent).toBe('slurm.job.user == "bo\\"b"');
    expect(b.valueCalls).toEqual(['slurm.job.user']);
  });

  it('runs on Shift+Enter, and on blur after a change', async () => {
    const b = new FakeBackend();
    const onRun = jest.fn();
    render(<Harness backend={b} onRun={onRun} initial="host.name" />);
    fireEvent.keyDown(input(), { key: 'Enter', shiftKey: true });
    expect(onRun).toHaveBeenCalledTimes(1);
    fireEvent.blur(input());
    expect(onRun).toHaveBeenCalledTimes(1); // nothing changed
    await userEvent.type(input(), 'x');
    fireEvent.blur(input());
    expect(onRun).toHaveBeenCalledTimes(2);
  });

  it('validates a filter holding dashboard variables without marking them', async () => {
    const b = new FakeBackend();
    render(<Harness backend={b} initial={'slurm.job.id in $job && slurm.job.usr == $user'} />);
    const err = await screen.findByTestId('slurmscope-filter-error');
    expect(b.validated.at(-1)).toBe('slurm.job.id in [""] && slurm.job.usr == "xxx"');
    expect(err).toHaveTextContent(/^slurm\.job\.usr$/);
    expect(screen.getAllByTestId('slurmscope-filter-error')).toHaveLength(1);
  });
});
