// The overlay lower stack of a sandbox as cube-launch arguments (pure). overlayfs takes
// `lowerdir=top:...:lowest` in the mount data, which the kernel limits to one page (4096 bytes)
// together with upperdir and workdir. Layers of the store share one parent directory, so they
// go as bare 64-hex names resolved in that directory (`-L`): 65 bytes a layer, so 59 layers fit
// beside a 100-byte upper and work path, where absolute paths under /var/lib/cubed would
// allow about 40. cube-launch then hands each layer to overlayfs as an fd (/proc/self/fd/N,
// shorter still), so the sandbox's mountinfo shows no host path; the check here stays on this form.
import { basename, dirname } from 'node:path';
import { CubeError } from '../../errors.js';

/** The kernel's limit on mount data (one page). */
export const MOUNT_DATA_MAX = 4096;

/** `-L DIR -l a:b:c` (or `-l /abs/a:/abs/b`) for layers given LOWEST first; throws when they cannot be mounted. */
export function lowerArgs(layers: readonly string[], upper: string, work: string): string[] {
  if (layers.length === 0) throw new CubeError('CREATE_FAILED', 'template has no layers');
  for (const l of [...layers, upper, work]) {
    if (!l.startsWith('/') || /[:,\\\n]/.test(l))
      throw new CubeError('CREATE_FAILED', `layer path ${JSON.stringify(l)} must be absolute without ':', ',' or '\\' (overlayfs option syntax)`);
  }
  const top = [...layers].reverse();
  const parent = dirname(top[0]!);
  const shared = top.length > 1 && top.every((l) => dirname(l) === parent);
  const lower = shared ? top.map((l) => basename(l)).join(':') : top.join(':');
  const bytes = `lowerdir=${lower},upperdir=${upper},workdir=${work}`.length + 1;
  if (bytes > MOUNT_DATA_MAX) {
    throw new CubeError(
      'CREATE_FAILED',
      `${layers.length} layers need ${bytes} bytes of overlay options, over the kernel's ${MOUNT_DATA_MAX}: flatten the image (fewer layers)`,
    );
  }
  return shared ? ['-L', parent, '-l', lower] : ['-l', lower];
}
