import { completionAt, indexOf, span } from './cel';

describe('indexOf', () => {
  it.each([
    ['abc', 1, 1, 0],
    ['abc', 1, 3, 2],
    ['abc', 1, 9, 3],
    ['a\nbc', 2, 2, 3],
    ['a\nbc', 5, 1, 4],
    // Columns count code points; the browser counts UTF-16 units.
    ['"🚀" == x', 1, 5, 5],
    ['"✓🚀✓" == slurm.job.usr', 1, 10, 10],
    ['x\n"🚀"y', 2, 4, 6],
  ])('%j line %d column %d', (text, line, col, want) => {
    expect(indexOf(text, line, col)).toBe(want);
  });
});

describe('span', () => {
  it('covers a dotted name, a literal or one character', () => {
    const t = 'slurm.job.usr == "x y" && @';
    expect(span(t, 0)).toEqual([0, 13]);
    expect(span(t, 17)).toEqual([17, 22]);
    expect(span(t, t.length - 1)).toEqual([t.length - 1, t.length]);
    expect(span(t, t.length)).toEqual([t.length, t.length]);
    expect(span('🚀', 0)).toEqual([0, 2]);
  });
});

describe('completionAt', () => {
  it('offers attribute names while a name is typed', () => {
    expect(completionAt('slurm.job.us', 12)).toEqual({ kind: 'attribute', prefix: 'slurm.job.us', from: 0, to: 12 });
    expect(completionAt('x == "a" && slu', 15)).toEqual({ kind: 'attribute', prefix: 'slu', from: 12, to: 15 });
    // In the middle of a name, the whole name is replaced.
    expect(completionAt('slurm.job.user == "a"', 5)).toEqual({ kind: 'attribute', prefix: 'slurm', from: 0, to: 14 });
  });

  it('offers values inside a literal compared with an attribute', () => {
    expect(completionAt('slurm.job.user == "bo', 21)).toEqual({
      kind: 'value', attribute: 'slurm.job.user', prefix: 'bo', from: 19, to: 21, quoted: true, quote: '"',
    });
    expect(completionAt('slurm.job.id in ["1", "4', 24)).toMatchObject({ kind: 'value', attribute: 'slurm.job.id', prefix: '4' });
    expect(completionAt("host.name.startsWith('no')", 24)).toMatchObject({ kind: 'value', attribute: 'host.name', prefix: 'no', to: 24 });
    expect(completionAt('slurm.job.user == ', 18)).toMatchObject({ kind: 'value', attribute: 'slurm.job.user', quoted: false });
  });

  it('offers nothing inside a pattern or after a literal', () => {
    expect(completionAt('matches(slurm.job.name, "tr', 27)).toEqual({ kind: 'none' });
    expect(completionAt('"abc"de', 7)).toEqual({ kind: 'none' });
    expect(completionAt('x == "a" ', 9)).toEqual({ kind: 'none' });
  });
});
