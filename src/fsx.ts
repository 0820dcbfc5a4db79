// File facts where "not there" is an answer, not an error: ENOENT and ENOTDIR give undefined (or
// no entries); any other failure (EACCES, EIO, ELOOP...) is thrown, where `.catch(() => undefined)`
// used to read it as "absent" too (issue 25 item 7).
import type { Dirent, Stats } from 'node:fs';
import { lstat, readdir, readFile, stat } from 'node:fs/promises';

const ABSENT = new Set(['ENOENT', 'ENOTDIR']);

export function isAbsent(e: unknown): boolean {
  return ABSENT.has((e as NodeJS.ErrnoException | null)?.code ?? '');
}

async function orAbsent<T, A>(p: Promise<T>, absent: A): Promise<T | A> {
  try {
    return await p;
  } catch (e) {
    if (isAbsent(e)) return absent;
    throw e;
  }
}

export const statOrAbsent = (path: string): Promise<Stats | undefined> => orAbsent(stat(path), undefined);
export const lstatOrAbsent = (path: string): Promise<Stats | undefined> => orAbsent(lstat(path), undefined);
export const readTextOrAbsent = (path: string): Promise<string | undefined> => orAbsent(readFile(path, 'utf8'), undefined);
export const entriesOrNone = (dir: string): Promise<Dirent[]> => orAbsent(readdir(dir, { withFileTypes: true }), []);
export const namesOrNone = (dir: string): Promise<string[]> => orAbsent(readdir(dir), []);
