//! Power: cutting it (the current image becomes the durable one, maybe
//! with a torn write), cutting it at a chosen write or only when it would
//! drop written data, counting what a cut drops, reviving, and the walks
//! over either image that the cut and the control socket use.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ffi::OsString;

use rand::{Rng, SeedableRng};

use super::{
    ArmedCut, Content, CutReport, DirData, FileData, Ino, Inode, Kind, Model, Torn, BLOCK,
    MAX_LISTED_PATHS, ROOT,
};

/// Where each inode lives in the durable image: (parent, name).
type Locations = HashMap<Ino, (Ino, OsString)>;

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

    /// Where each inode reachable through durable entries would live
    /// after a cut (its first durable entry), and how many durable
    /// entries name it.
    fn durable_locations(&self) -> (Locations, HashMap<Ino, u32>) {
        let mut location: Locations = HashMap::new();
        let mut links: HashMap<Ino, u32> = HashMap::new();
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
        (location, links)
    }

    /// What a cut now would drop: (bytes, written bytes), see
    /// [`CutReport`]. A file reachable through durable entries loses
    /// what its current contents hold beyond its durable ones; a file
    /// that is not (its entry never made durable) but is in the current
    /// tree or open loses everything.
    fn would_drop(&self, location: &Locations) -> (u64, u64) {
        let current: BTreeSet<Ino> = self.tree(false).values().copied().collect();
        let (mut bytes, mut written) = (0u64, 0u64);
        for (ino, inode) in &self.inodes {
            let Content::File(f) = &inode.content else {
                continue;
            };
            if location.contains_key(ino) {
                let Some((a, b)) = f.dirty else { continue };
                let end = (b as usize).min(f.data.len());
                for i in (a as usize).min(end)..end {
                    let now = f.data[i];
                    let durable = f.durable.get(i).copied();
                    if durable.unwrap_or(0) != now {
                        bytes += 1;
                    }
                    if now != 0 && durable != Some(now) {
                        written += 1;
                    }
                }
            } else if current.contains(ino) || inode.opens > 0 {
                bytes += f.data.len() as u64;
                written += f.data.iter().filter(|&&b| b != 0).count() as u64;
            }
        }
        (bytes, written)
    }

    /// Written bytes (not zero) a power cut now would drop: zero when
    /// everything written has been made durable (or was zeros).
    pub fn unsynced_written_bytes(&self) -> u64 {
        let (location, _) = self.durable_locations();
        self.would_drop(&location).1
    }

    /// Cuts power only if the cut would drop written bytes
    /// ([`Model::unsynced_written_bytes`]); `None` (and nothing changes)
    /// otherwise, or when already dead.
    pub fn power_cut_if_unsynced(&mut self, torn_seed: Option<u64>) -> Option<CutReport> {
        if !self.alive || self.unsynced_written_bytes() == 0 {
            return None;
        }
        Some(self.power_cut(torn_seed))
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
        let (location, links) = self.durable_locations();
        // The torn prefix reaches the durable image first, so what is
        // counted as dropped is what the cut really lost.
        if let Some(seed) = torn_seed {
            report.torn = self.tear(seed, &location, tear_ino);
        }
        (report.bytes_dropped, report.written_bytes_dropped) = self.would_drop(&location);
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
        self.stats.written_bytes_dropped_total += report.written_bytes_dropped;
        self.stats.last_cut = Some(report.clone());
        report
    }

    /// Applies a prefix of one surviving file's last unsynced write to its
    /// durable image. The prefix ends before the write's last byte that is
    /// not zero, so a torn write always loses some of what was written: a
    /// write whose only such byte is its first (or that has none) is not
    /// torn.
    fn tear(&mut self, seed: u64, location: &Locations, prefer: Option<Ino>) -> Option<Torn> {
        // How many bytes of a write a tear may keep at most.
        let most_kept = |bytes: &[u8]| bytes.iter().rposition(|&b| b != 0).filter(|&i| i >= 1);
        let mut candidates: Vec<Ino> = self
            .inodes
            .iter()
            .filter(|(ino, inode)| {
                location.contains_key(ino)
                    && matches!(&inode.content, Content::File(f) if f.last_write.as_ref().is_some_and(|w| most_kept(&w.1).is_some()))
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
        let kept = rng.gen_range(1..=most_kept(bytes)?);
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
