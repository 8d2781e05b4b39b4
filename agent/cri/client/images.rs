//! The image service: looking an image up and pulling it.

use super::*;

impl CriClient {
    /// `ImageStatus`: the image's ID if present.
    pub async fn image_id(&self, image: &str) -> Result<Option<api::Image>, CriError> {
        let mut c = self.images.clone();
        let r = self
            .call(
                "ImageStatus",
                image,
                CALL_TIMEOUT,
                c.image_status(req(
                    api::ImageStatusRequest {
                        image: Some(api::ImageSpec { image: image.to_string(), ..Default::default() }),
                        verbose: false,
                    },
                    CALL_TIMEOUT,
                )),
            )
            .await?;
        Ok(r.image)
    }

    /// `PullImage`; returns the image reference the runtime resolved.
    pub async fn pull_image(
        &self,
        image: &str,
        sandbox_config: Option<api::PodSandboxConfig>,
    ) -> Result<String, CriError> {
        self.pull_image_with(image, sandbox_config, None).await
    }

    /// `PullImage` with registry credentials (`imagePullSecrets`).
    pub async fn pull_image_with(
        &self,
        image: &str,
        sandbox_config: Option<api::PodSandboxConfig>,
        auth: Option<api::AuthConfig>,
    ) -> Result<String, CriError> {
        let mut c = self.images.clone();
        let r = self
            .call(
                "PullImage",
                image,
                PULL_TIMEOUT,
                c.pull_image(req(
                    api::PullImageRequest {
                        image: Some(api::ImageSpec { image: image.to_string(), ..Default::default() }),
                        auth,
                        sandbox_config,
                    },
                    PULL_TIMEOUT,
                )),
            )
            .await?;
        Ok(r.image_ref)
    }
}

/// What the runtime says about the filesystem holding its images (CRI `ImageFsInfo`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageFs {
    /// Where the filesystem is mounted (the runtime's image store).
    pub mountpoint: String,
    /// Bytes the runtime's images use on it.
    pub used_bytes: u64,
    /// Inodes they use.
    pub inodes_used: u64,
}

impl CriClient {
    /// `ListImages`: every image the image service holds.
    pub async fn images(&self) -> Result<Vec<api::Image>, CriError> {
        self.list_images(CALL_TIMEOUT).await
    }

    /// `RemoveImage` by ID (or reference); an image already gone is no error.
    pub async fn remove_image(&self, image: &str) -> Result<(), CriError> {
        let mut c = self.images.clone();
        let removal = self
            .call(
                "RemoveImage",
                image,
                CALL_TIMEOUT,
                c.remove_image(req(
                    api::RemoveImageRequest {
                        image: Some(api::ImageSpec { image: image.to_string(), ..Default::default() }),
                    },
                    CALL_TIMEOUT,
                )),
            )
            .await
            .map(|_| ());
        ignore_not_found(removal)
    }

    /// `ImageFsInfo`: the image filesystems the runtime reports (containerd: one, its
    /// snapshotter's directory).
    pub async fn image_fs_info(&self) -> Result<Vec<ImageFs>, CriError> {
        let mut c = self.images.clone();
        let r = self
            .call(
                "ImageFsInfo",
                "image filesystem",
                CALL_TIMEOUT,
                c.image_fs_info(req(api::ImageFsInfoRequest {}, CALL_TIMEOUT)),
            )
            .await?;
        Ok(r.image_filesystems
            .into_iter()
            .map(|fs| ImageFs {
                mountpoint: fs.fs_id.map(|id| id.mountpoint).unwrap_or_default(),
                used_bytes: fs.used_bytes.map(|u| u.value).unwrap_or(0),
                inodes_used: fs.inodes_used.map(|u| u.value).unwrap_or(0),
            })
            .collect())
    }
}
