//! Power: cutting it (the current image becomes the durable one, maybe
//! with a torn write), cutting it at a chosen write, reviving, and the
//! walks over either image that the cut and the control socket use.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ffi::OsString;

use rand::{Rng, SeedableRng};

use super::{
    ArmedCut, Content, CutReport, DirData, FileData, Ino, Inode, Kind, Model, Torn, BLOCK,
    MAX_LISTED_PATHS, ROOT,
};

impl Model {
    /// Paths of every file and directory reachable from the root, through
    /// current entries or durable ones, with their inodes.
    fn tree(&self, durable: bool) -> BTreeMap<String, Ino> {
        let mut out = BTreeMap::new();
        let mut queue = VecDeque::from([(ROOT, String::new())]);
        let mut seen = BTreeSet::from([ROOT]);
        while let Some((dir, path)) = queue.pop_front() {
            let Some(Content::Dir(d)) = self.inodes.get(&dir).map(|i| &i.content) else {
                continue;
            };
            let entries = if durable { &d.durable } else { &d.entries };
            for (name, child) in entries {
                let Some(inode) = self.inodes.get(child) else {
                    continue;
                };
                let child_path = format!("{path}/{}", name.to_string_lossy());
                if inode.kind() == Kind::Dir {
                    if !seen.insert(*child) {
                        continue;
                    }
                    queue.push_back((*child, child_path.clone()));
                }
                out.insert(child_path, *child);
            }
        }
        out
    }

    /// Power loss: the model goes dead and the current image becomes the
    /// durable one. With `torn_seed`, one file (chosen by the seed) that
    /// has an unsynced last write keeps a prefix of it (also chosen by the
    /// seed, at least one byte). Disarms an [`ArmedCut`]. Already dead:
    /// nothing changes, and the last cut's report comes back.
    pub fn power_cut(&mut self, torn_seed: Option<u64>) -> CutReport {
        self.armed = None;
        if !self.alive {
            return self.stats.last_cut.clone().unwrap_or_default();
        }
        self.cut(torn_seed, None)
    }

    /// Cuts power at the next write to a path containing `path`.
    pub fn arm_cut(&mut self, cut: ArmedCut) {
        self.armed = Some(cut);
    }

    /// Whether a write triggered an armed cut since the last call.
    pub fn take_cut_by_write(&mut self) -> bool {
        std::mem::take(&mut self.cut_by_write)
    }

    /// The power cut; a torn write prefers `tear_ino`'s last write.
    pub(super) fn cut(&mut self, torn_seed: Option<u64>, tear_ino: Option<Ino>) -> CutReport {
        self.alive = false;
        let current = self.tree(false);
        let durable = self.tree(true);
        let mut report = CutReport::default();
        for (path, ino) in &current {
            if durable.get(path) != Some(ino) && report.lost_paths.len() < MAX_LISTED_PATHS {
                report.lost_paths.push(path.clone());
            }
        }
        for (path, ino) in &durable {
            if current.get(path) != Some(ino) && report.restored_paths.len() < MAX_LISTED_PATHS {
                report.restored_paths.push(path.clone());
            }
        }
        // Where each surviving inode lives, and how many durable entries
        // name it.
        let mut location: HashMap<Ino, (Ino, OsString)> = HashMap::new();
        let mut links: HashMap<Ino, u32> = HashMap::new();
        {
            let mut queue = VecDeque::from([ROOT]);
            while let Some(dir) = queue.pop_front() {
                let Some(Content::Dir(d)) = self.inodes.get(&dir).map(|i| &i.content) else {
                    continue;
                };
                for (name, child) in &d.durable {
                    let Some(inode) = self.inodes.get(child) else {
                        continue;
                    };
                    if inode.kind() == Kind::Dir && location.contains_key(child) {
                        continue;
                    }
                    *links.entry(*child).or_default() += 1;
                    location
                        .entry(*child)
                        .or_insert_with(|| (dir, name.clone()));
                    if inode.kind() == Kind::Dir {
                        queue.push_back(*child);
                    }
                }
            }
        }
        let current_inodes: BTreeSet<Ino> = current.values().copied().collect();
        for (ino, inode) in &self.inodes {
            let Content::File(f) = &inode.content else {
                continue;
            };
            if location.contains_key(ino) {
                if let Some((a, b)) = f.dirty {
                    let end = (b as usize).min(f.data.len());
                    report.bytes_dropped += (a as usize..end)
                        .filter(|&i| f.durable.get(i).copied().unwrap_or(0) != f.data[i])
                        .count() as u64;
                }
            } else if current_inodes.contains(ino) || inode.opens > 0 {
                report.bytes_dropped += f.data.len() as u64;
            }
        }
        if let Some(seed) = torn_seed {
            report.torn = self.tear(seed, &location, tear_ino);
        }
        let mut orphans = Vec::new();
        for (ino, inode) in self.inodes.iter_mut() {
            if *ino == ROOT {
                if let Content::Dir(d) = &mut inode.content {
                    d.entries = d.durable.clone();
                }
                continue;
            }
            match location.get(ino) {
                Some((parent, name)) => {
                    inode.parent = *parent;
                    inode.name = name.clone();
                    inode.nlink = links[ino];
                    inode.durable_links = links[ino];
                    match &mut inode.content {
                        Content::File(f) => {
                            f.data = f.durable.clone();
                            f.dirty = None;
                            f.last_write = None;
                        }
                        Content::Dir(d) => d.entries = d.durable.clone(),
                    }
                }
                None => {
                    inode.parent = 0;
                    inode.nlink = 0;
                    inode.durable_links = 0;
                    inode.content = match inode.content {
                        Content::File(_) => Content::File(FileData {
                            data: Vec::new(),
                            durable: Vec::new(),
                            dirty: None,
                            last_write: None,
                        }),
                        Content::Dir(_) => Content::Dir(DirData {
                            entries: BTreeMap::new(),
                            durable: BTreeMap::new(),
                        }),
                    };
                    orphans.push(*ino);
                }
            }
        }
        for ino in orphans {
            self.collect(ino);
        }
        self.used = self.inodes.values().map(Inode::file_len).sum();
        self.stats.power_cuts += 1;
        self.stats.bytes_dropped_total += report.bytes_dropped;
        self.stats.last_cut = Some(report.clone());
        report
    }

    /// Applies a prefix of one surviving file's last unsynced write to its
    /// durable image.
    fn tear(
        &mut self,
        seed: u64,
        location: &HashMap<Ino, (Ino, OsString)>,
        prefer: Option<Ino>,
    ) -> Option<Torn> {
        let mut candidates: Vec<Ino> = self
            .inodes
            .iter()
            .filter(|(ino, inode)| {
                location.contains_key(ino)
                    && matches!(&inode.content, Content::File(f) if f.last_write.as_ref().is_some_and(|w| !w.1.is_empty()))
            })
            .map(|(ino, _)| *ino)
            .collect();
        if candidates.is_empty() {
            return None;
        }
        candidates.sort_unstable();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let pick = rng.gen_range(0..candidates.len());
        let ino = prefer
            .filter(|p| candidates.contains(p))
            .unwrap_or(candidates[pick]);
        let path = self.path_of(ino);
        let Some(Content::File(f)) = self.inodes.get_mut(&ino).map(|i| &mut i.content) else {
            return None;
        };
        let (offset, bytes) = f.last_write.as_ref()?;
        let kept = rng.gen_range(1..=bytes.len());
        let start = *offset as usize;
        if f.durable.len() < start + kept {
            f.durable.resize(start + kept, 0);
        }
        f.durable[start..start + kept].copy_from_slice(&bytes[..kept]);
        Some(Torn {
            path,
            offset: *offset,
            kept: kept as u64,
            len: bytes.len() as u64,
        })
    }

    /// Power is back: operations work again.
    pub fn revive(&mut self) {
        self.alive = true;
    }

    /// What a path (`/a/b`) holds in the durable image: its kind and, for
    /// a file, its durable size.
    pub fn durable_entry(&self, path: &str) -> Option<(Kind, u64)> {
        let path = path.trim_end_matches('/');
        if path.is_empty() {
            return Some((Kind::Dir, BLOCK));
        }
        let ino = *self.tree(true).get(path)?;
        Some(match &self.inodes.get(&ino)?.content {
            Content::File(f) => (Kind::File, f.durable.len() as u64),
            Content::Dir(_) => (Kind::Dir, BLOCK),
        })
    }

    /// The inode at a path (`/a/b`) of the current image.
    pub fn resolve(&self, path: &str) -> Option<Ino> {
        let path = path.trim_end_matches('/');
        if path.is_empty() {
            return Some(ROOT);
        }
        self.tree(false).get(path).copied()
    }
}
