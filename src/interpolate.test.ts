import { escapeInside, interpolate, maskVariables, quote, Resolve } from './interpolate';

const vars: Record<string, string | string[]> = {
  job: '4242',
  jobs: ['1', '2'],
  one: ['7'],
  none: [],
  user: 'bob',
  evil: 'a" || true || "',
  name: 'train "llama" ✓\n',
};

// resolve mimics Grafana's template service: $x, ${x}, ${x:fmt}, [[x]].
const resolve: Resolve = (ref) => {
  const m = /^\$\{?([A-Za-z_][A-Za-z0-9_.]*)(?::[^}]*)?\}?$|^\[\[([A-Za-z_][A-Za-z0-9_.]*)(?::[^\]]*)?\]\]$/.exec(ref);
  const name = m && (m[1] ?? m[2]);
  return name && name in vars ? vars[name] : undefined;
};

// decode reads a CEL double-quoted literal back, for round-trip checks.
function decode(lit: string): string {
  expect(lit.startsWith('"') && lit.endsWith('"')).toBe(true);
  let out = '';
  for (let i = 1; i < lit.length - 1; i++) {
    const c = lit[i];
    if (c === '"') {
      throw new Error(`unescaped quote at ${i} in ${lit}`);
    }
    if (c !== '\\') {
      out += c;
      continue;
    }
    const e = lit[++i];
    if (e === 'x') {
      out += String.fromCharCode(parseInt(lit.slice(i + 1, i + 3), 16));
      i += 2;
    } else {
      out += ({ n: '\n', r: '\r', t: '\t' } as Record<string, string>)[e] ?? e;
    }
  }
  return out;
}

describe('interpolate', () => {
  it.each([
    ['slurm.job.id == $job', 'slurm.job.id == "4242"'],
    ['slurm.job.id == ${job}', 'slurm.job.id == "4242"'],
    ['slurm.job.id == ${job:json}', 'slurm.job.id == "4242"'],
    ['slurm.job.id == [[job]]', 'slurm.job.id == "4242"'],
    ['slurm.job.id == $jobs', 'slurm.job.id in ["1", "2"]'],
    ['slurm.job.id==$jobs && host.name == "a"', 'slurm.job.id in ["1", "2"] && host.name == "a"'],
    ['slurm.job.id in $jobs', 'slurm.job.id in ["1", "2"]'],
    ['slurm.job.id in $job', 'slurm.job.id in ["4242"]'],
    ['slurm.job.id == $one', 'slurm.job.id == "7"'],
    ['slurm.job.id == $none', 'slurm.job.id in []'],
    ['slurm.job.id != $jobs', '!(slurm.job.id in ["1", "2"])'],
    ['slurm.job.user == $evil', 'slurm.job.user == "a\\" || true || \\""'],
    ['slurm.job.name == $name', 'slurm.job.name == "train \\"llama\\" ✓\\n"'],
    ['slurm.job.name == "x-$job"', 'slurm.job.name == "x-4242"'],
    ['slurm.job.name == "x-$evil"', 'slurm.job.name == "x-a\\" || true || \\""'],
    ["slurm.job.name == 'x-$evil'", "slurm.job.name == 'x-a\\\" || true || \\\"'"],
    ['slurm.job.name == "$jobs"', 'slurm.job.name == "1,2"'],
    ['slurm.job.name == r"$evil"', 'slurm.job.name == r"$evil"'],
    ['slurm.job.name == "\\$job"', 'slurm.job.name == "\\$job"'],
    ['slurm.job.user == $unknown', 'slurm.job.user == $unknown'],
    ['slurm.job.user == "$unknown"', 'slurm.job.user == "$unknown"'],
    ['matches(slurm.job.name, $user)', 'matches(slurm.job.name, "bob")'],
    ['slurm.job.name == "unterminated $job', 'slurm.job.name == "unterminated 4242'],
    ['', ''],
  ])('%s', (src, want) => {
    expect(interpolate(src, resolve)).toBe(want);
  });

  it('never lets a value out of its literal', () => {
    const alphabet = ['"', "'", '\\', '\n', '\r', '\t', '\x00', '\x1b', '\x7f', '$', '{', '}', '[', ']', '|', '&', 'a', 'é', '✓', '🚀', ' ', '\u2028'];
    let seed = 42;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed % n;
    };
    for (let n = 0; n < 2000; n++) {
      let v = '';
      for (let k = rand(12); k > 0; k--) {
        v += alphabet[rand(alphabet.length)];
      }
      const out = interpolate('slurm.job.name == $v && host.name == "h"', (ref) => (ref === '$v' ? v : undefined));
      const m = /^slurm\.job\.name == ("(?:[^"\\]|\\.)*") && host\.name == "h"$/su.exec(out);
      expect(m).not.toBeNull();
      expect(decode(m![1])).toBe(v);
    }
  });

  it('quotes lone surrogates as a replacement character', () => {
    expect(quote('a\ud800b')).toBe('"a\uFFFDb"');
  });

  it('escapes for the literal it is in', () => {
    expect(escapeInside(`it's "x"`, "'")).toBe(`it\\'s \\"x\\"`);
  });
});

describe('maskVariables', () => {
  it.each([
    ['slurm.job.id == $job', 'slurm.job.id == "xx"'],
    ['slurm.job.id in $job && host.name in ${host}', 'slurm.job.id in [""] && host.name in [""   ]'],
    ['slurm.job.id in $jb', 'slurm.job.id in [ ]'],
    ['slurm.job.id in $j', 'slurm.job.id in []'],
    ['slurm.job.name == "x-$job" && $', 'slurm.job.name == "x-$job" && $'],
    ['slurm.job.usr == [[job]]', 'slurm.job.usr == "xxxxx"'],
  ])('%s', (src, want) => {
    const got = maskVariables(src);
    expect(got).toBe(want);
    expect(got.length).toBe(src.length);
  });
});
