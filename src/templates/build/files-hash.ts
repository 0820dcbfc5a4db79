// The e2b SDK's files hash of a COPY, in a module of its own: cubectl (src/templates/recipe.ts)
// computes it without loading the daemon's build code, the daemon checks uploads against it.
import { createHash } from 'node:crypto';

/** st_mode's file type bits of a regular file and a link: the SDK hashes the whole st_mode. */
export const S_IFREG = 0o100000;
export const S_IFLNK = 0o120000;

/**
 * The e2b SDK's files hash of a COPY (its calculateFilesHash), fed entry by entry in the
 * context's sorted order: `COPY <src> <dest>`, then per entry its path in the context, its
 * st_mode and size as decimal text, and a file's bytes or a link's target. cubectl computes it
 * from the context; the daemon checks an upload against it (TemplateBuilder.verifyUpload).
 */
export class FilesHash {
  private readonly h;
  constructor(src: string, dest: string) {
    this.h = createHash('sha256').update(`COPY ${src} ${dest}`);
  }
  entry(rel: string, mode: number, size: number): this {
    this.h.update(rel).update(mode.toString()).update(size.toString());
    return this;
  }
  data(bytes: Buffer | string): this {
    this.h.update(bytes);
    return this;
  }
  digest(): string {
    return this.h.digest('hex');
  }
}
